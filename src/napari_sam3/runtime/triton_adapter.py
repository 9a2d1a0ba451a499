"""Generic Triton Python-backend adapter: the `model.py` of every Python model we write.

It loads the logic module named by the config parameter `logic_module` from its own folder
and turns Triton requests into `Logic.run(inputs, call)` calls, with BLS for `call`. Every
request is first checked by `validate.model_inputs` (the client's own rules) against the
model's manifest (its config parameter, else the repository's `sam3_manifest.json`): a raw
client's bad or oversize request is refused at once with the message `Sam3Client` gives.
"""

import importlib.util
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


def _load_logic(version_dir, module_name):
    if version_dir not in sys.path:
        sys.path.insert(0, version_dir)
    path = os.path.join(version_dir, module_name + ".py")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _bls_call(model_name, inputs, output_names):
    request = pb_utils.InferenceRequest(
        model_name=model_name,
        inputs=[
            pb_utils.Tensor(name, np.ascontiguousarray(value)) for name, value in inputs.items()
        ],
        requested_output_names=list(output_names),
    )
    response = request.exec()
    if response.has_error():
        from errors import RunFailed  # beside this file (its folder is on sys.path by now)

        raise RunFailed(f"{model_name}: {response.error().message()}")
    return {
        name: pb_utils.get_output_tensor_by_name(response, name).as_numpy() for name in output_names
    }


def _manifest(model_dir, parameters):
    """The model's manifest: its config parameter, else the repository's file (the graphs of
    the python flavor), else None (the checks then leave the exact sizes out)."""
    import contract

    if contract.MANIFEST_PARAMETER in parameters:
        return contract.manifest_from_config(parameters)
    path = os.path.join(os.path.dirname(os.path.abspath(model_dir)), contract.MANIFEST_FILE)
    return contract.load_manifest(path) if os.path.isfile(path) else None


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        parameters = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        module = _load_logic(version_dir, parameters["logic_module"])
        self.input_names = [i["name"] for i in config["input"]]
        self.output_names = [o["name"] for o in config["output"]]
        self.logic = module.Logic(version_dir, parameters)
        import validate  # beside this file (the version folder is on sys.path now)

        self.validate = validate
        self.manifest = _manifest(args["model_repository"], parameters)

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = {}
            for name in self.input_names:
                tensor = pb_utils.get_input_tensor_by_name(request, name)
                if tensor is not None:
                    inputs[name] = tensor.as_numpy()
            try:
                self.validate.model_inputs(inputs, self.manifest)
                outputs = self.logic.run(inputs, _bls_call)
                # a model may answer a subset (sam3_cached answers a miss with its status only)
                tensors = [
                    pb_utils.Tensor(n, np.ascontiguousarray(outputs[n]))
                    for n in self.output_names
                    if n in outputs
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as error:  # noqa: BLE001 - a bad request must not stop the server
                responses.append(
                    pb_utils.InferenceResponse(
                        output_tensors=[], error=pb_utils.TritonError(str(error))
                    )
                )
        return responses

    def finalize(self):
        close = getattr(self.logic, "close", None)
        if close is not None:
            close()
