"""Serves one ONNX graph with onnxruntime (the `--flavor python` repository)."""

import os

import numpy as np
import onnxruntime as ort


def make_session(path: str, threads: int = 0) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    providers = [
        p
        for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
        if p in ort.get_available_providers()
    ]
    return ort.InferenceSession(path, options, providers=providers)


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        threads = int(parameters.get("intra_op_threads", "0"))
        self.session = make_session(os.path.join(model_dir, "model.onnx"), threads)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: dict, call=None) -> dict:
        missing = sorted(set(self.inputs) - set(inputs))
        if missing:
            raise ValueError(f"missing inputs: {', '.join(missing)}")
        feed = {name: np.asarray(inputs[name]) for name in self.inputs}
        return dict(zip(self.output_names, self.session.run(self.output_names, feed), strict=True))
