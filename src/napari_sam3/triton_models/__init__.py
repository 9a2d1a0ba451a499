"""The logic of the Python-backend models in the Triton model repository.

Each module here is standalone (numpy, onnxruntime and its sibling modules only), because
`sam3-export` copies it beside a generic Triton adapter (`triton_adapter.py`, written as the
model's `model.py`). The embedded engine imports the copies from the repository, so Triton
and the embedded engine run the very same code.

Every logic module defines `class Logic` with `__init__(self, model_dir, parameters)` and
`run(self, inputs, call) -> outputs`, where `inputs`/`outputs` map tensor names to numpy
arrays and `call(model_name, inputs, output_names)` runs another model of the repository
(BLS on Triton, a direct call in the embedded engine).
"""
