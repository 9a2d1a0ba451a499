"""The logic of the Python-backend models in the Triton model repository.

Each module here needs only numpy (onnxruntime for `onnx_runner`), its sibling modules and
`contract.py` / `masks/rle.py` / `masks/rle_kernels.py` (numba where installed, else numpy),
because `sam3-export` copies it, with those files, beside a
generic Triton adapter (`triton_adapter.py`, written as the model's `model.py`); there the
modules import each other by plain name (`import contract`), inside the package relatively.
The embedded engine imports the package's own modules (`napari_sam3.runtime.<name>`), not
the repository's copies; it warns when a repository's copy differs from them (a repository
written by another version), so Triton and the embedded engine run the same code.

Every logic module defines `class Logic` with `__init__(self, model_dir, parameters)` and
`run(self, inputs, call) -> outputs`, where `inputs`/`outputs` map tensor names to numpy
arrays and `call(model_name, inputs, output_names)` runs another model of the repository
(BLS on Triton, a direct call in the embedded engine).
"""
