"""The embedded engine: a model repository run in-process (OpenVINO or ONNX Runtime).

It runs the SAME repository a Triton server would: every ONNX graph, every ensemble's steps in
the order their tensors become available, and the Python models' logic (the modules under
`napari_sam3.runtime`, of which the repository holds verbatim copies).
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from napari_sam3.core import contract
from napari_sam3.core.errors import InvalidInput, InvalidState, MissingFile
from napari_sam3.runtime.engines.model_config import (
    ModelConfig,
    OutputNames,
    Outputs,
    Tensors,
    load_model_configs,
)


class LocalEngine:
    """In-process runner of a model repository written by `sam3-export`.

    `runtime` ("openvino", "onnxruntime" or "auto") and `precision` ("fp32", "bf16", "int8" or
    "auto") choose how its ONNX graphs run (`runtime.onnx_runner.choose`); `runtime_choices()` says,
    per graph, what was picked and why.
    """

    local = True  # the models run in this process

    def __init__(
        self,
        repository: str | Path,
        threads: int = 0,
        model_parameters: Mapping[str, Mapping[str, object]] | None = None,
        runtime: str = "auto",
        precision: str = "auto",
    ) -> None:
        from napari_sam3.runtime import onnx_runner

        onnx_runner.check_choice(runtime, precision)
        self.repository = Path(repository)
        if not self.repository.is_dir():
            raise MissingFile(
                f"model repository {self.repository} does not exist; write one with "
                "`sam3-export --checkpoint sam3.pt --out DIR` (or `--random-weights` for a demo)"
            )
        self.configs = load_model_configs(self.repository)
        if not self.configs:
            raise InvalidInput(f"{self.repository} holds no models (no */config.pbtxt)")
        from napari_sam3.runtime.engines.repository_code import stale_logic, stale_logic_message

        stale = stale_logic(self.repository)
        if stale:  # this engine runs the package's own code; a server on the copies would not
            warnings.warn(stale_logic_message(self.repository, stale), stacklevel=3)
        self.threads = threads
        from napari_sam3.masks import rle_kernels

        rle_kernels.set_threads(threads)  # the masks' threads too, not only the graphs'
        self.runtime, self.precision = runtime, precision
        # decided now, so that an impossible choice (bf16 on a CPU without it) fails at once
        verified = onnx_runner.load_verification(self.repository) if precision == "auto" else None
        self.choices = onnx_runner.choose_repository(
            {
                name: self.repository / name / "1"
                for name, config in self.configs.items()
                if _is_graph(config)
            },
            runtime,
            precision,
            verified=verified,
        )
        # per-model overrides of config parameters, e.g. {"sam3_cached": {"cache_bytes": 1e9}}
        self.model_parameters = {
            model: {k: str(v) for k, v in params.items()}
            for model, params in (model_parameters or {}).items()
        }
        # executions per model, as Triton's statistics count them (execution_count)
        self.executions: Counter[str] = Counter()
        self._runners: dict[str, object] = {}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def address(self) -> str:
        return f"local:{self.repository}"

    def runtime_summary(self, reasons: bool = False) -> str:
        """What runs the graphs, one short line ('openvino bf16: encoder, text, PVS; fp32:
        decoder, ...'); with `reasons`, why (each reason once). Graphs compile on first use,
        so a graph that fell back to fp32 then shows as fp32 from then on."""
        from napari_sam3.runtime import onnx_runner

        choices = dict(self.choices)  # no lock: a graph compiling holds it for seconds
        text = onnx_runner.summary(choices)
        if reasons and choices:
            text += ". Why: " + onnx_runner.reasons(choices)
        return text

    def runtime_choices(self) -> dict[str, Any]:
        """Per graph, the `onnx_runner.Choice` made (as compiled, once a graph has loaded)."""
        return dict(self.choices)

    def loaded_graphs(self) -> list[str]:
        """The graphs compiled so far, in the repository's order: a graph loads on its first
        request, so a text-only session never holds the concept, exemplar or click graphs."""
        with self._lock:
            return [name for name in self.choices if name in self._runners]

    def cache_bounds(
        self, features: int | None = None, heads: int | None = None
    ) -> tuple[int, int]:
        """Bound the feature cache and the heads cache of `sam3_cached` at these bytes from now
        on (None: unchanged); the bounds before, to restore them."""
        logic = self._runner(self.config(contract.CACHED))
        previous = (logic.features.max_bytes, logic.heads.max_bytes)
        if features is not None:
            logic.features.resize(features)
        if heads is not None:
            logic.heads.resize(heads)
        return previous

    def config(self, model_name: str) -> ModelConfig:
        try:
            return self.configs[model_name]
        except KeyError:
            raise InvalidInput(
                f"model {model_name!r} is not in {self.repository}; it holds: "
                + ", ".join(sorted(self.configs))
            ) from None

    def infer(self, model_name: str, inputs: Tensors, output_names: OutputNames = None) -> Outputs:
        if self._closed:
            raise InvalidState(
                f"the embedded engine over {self.repository} is closed; make a new Sam3Client"
            )
        config = self.config(model_name)
        inputs = {name: np.asarray(value) for name, value in inputs.items()}
        self._check_inputs(config, inputs)
        if config.is_ensemble:
            outputs = self._run_ensemble(config, inputs)
        else:
            outputs = self._runner(config).run(inputs, self._call, output_names)
            with self._lock:
                self.executions[model_name] += 1
        wanted = list(output_names) if output_names else [o.name for o in config.outputs]
        declared = {o.name for o in config.outputs} | set(outputs)
        unknown = [n for n in wanted if n not in declared]
        if unknown:
            raise InvalidInput(f"{model_name} has no output(s) {', '.join(unknown)}")
        # as over gRPC, an output the model did not answer is absent
        return {name: outputs[name] for name in wanted if name in outputs}

    def concurrency(self) -> int:
        return 1  # one request at a time: the graphs already use every thread

    def refresh(self) -> None:
        """The repository's configs, read again."""
        with self._lock:
            self.configs = load_model_configs(self.repository)

    def statistics(self, model_name: str) -> dict:
        """Execution counts in the shape of Triton's `get_inference_statistics(as_json=True)`."""
        self.config(model_name)
        with self._lock:
            count = self.executions[model_name]
        return {"model_stats": [{"name": model_name, "execution_count": str(count)}]}

    def _call(self, model_name: str, inputs: dict, output_names: Sequence[str]) -> dict:
        return self.infer(model_name, inputs, output_names)

    @staticmethod
    def _check_inputs(config: ModelConfig, inputs: Mapping[str, np.ndarray]) -> None:
        known = {spec.name for spec in config.inputs}
        extra = sorted(set(inputs) - known)
        if extra:
            raise InvalidInput(f"{config.name} has no input(s) {', '.join(extra)}")
        for spec in config.inputs:
            if spec.name in inputs:
                spec.check(inputs[spec.name])
            elif not spec.optional:
                raise InvalidInput(f"{config.name} needs input {spec.describe()}")

    def _run_ensemble(self, config: ModelConfig, inputs: dict) -> dict:
        tensors = dict(inputs)
        pending = list(config.proto.ensemble_scheduling.step)
        while pending:
            progressed = False
            for step in list(pending):
                step_config = self.config(step.model_name)
                required = [
                    ensemble_name
                    for model_input, ensemble_name in step.input_map.items()
                    if not step_config.input(model_input).optional
                ]
                if not all(name in tensors for name in required):
                    continue
                step_inputs = {
                    model_input: tensors[ensemble_name]
                    for model_input, ensemble_name in step.input_map.items()
                    if ensemble_name in tensors
                }
                produced = self.infer(step.model_name, step_inputs, list(step.output_map))
                for model_output, ensemble_name in step.output_map.items():
                    tensors[ensemble_name] = produced[model_output]
                pending.remove(step)
                progressed = True
            if not progressed:
                names = ", ".join(s.model_name for s in pending)
                raise InvalidInput(f"ensemble {config.name}: steps {names} lack their inputs")
        return tensors

    def close(self) -> None:
        """Release the ONNX Runtime sessions (and the models' caches); later calls fail."""
        with self._lock:
            self._closed = True
            self._runners.clear()

    def _runner(self, config: ModelConfig):
        with self._lock:
            runner = self._runners.get(config.name)
            if runner is None:
                runner = self._make_runner(config)
                self._runners[config.name] = runner
            return runner

    def _make_runner(self, config: ModelConfig):
        version_dir = self.repository / config.name / "1"
        parameters = {**config.parameters, **self.model_parameters.get(config.name, {})}
        if _is_graph(config):
            from napari_sam3.runtime import onnx_runner

            if self.threads:
                parameters["intra_op_threads"] = str(self.threads)
            # the runtime as resolved, the precision as asked (int8 only where the graph has its
            # INT8 IR): only an explicit bf16 or int8 may fail
            choice = self.choices[config.name]
            parameters.update(runtime=choice.runtime, precision=choice.asked)
            logic = onnx_runner.Logic(str(version_dir), parameters)
            self.choices[config.name] = logic.choice  # as compiled (auto may fall back)
            return logic
        module_name = parameters.get("logic_module")
        if config.backend != "python" or not module_name:
            raise InvalidInput(
                f"model {config.name}: the embedded engine cannot run it ({config.platform})"
            )
        module = importlib.import_module(f"napari_sam3.runtime.{module_name}")
        return module.Logic(str(version_dir), parameters)


def _is_graph(config: ModelConfig) -> bool:
    """An ONNX graph (served by Triton's ONNX Runtime or OpenVINO backend, or our runner)."""
    return (
        config.platform == "onnxruntime_onnx"
        or config.backend == "openvino"
        or (config.backend == "python" and config.parameters.get("logic_module") == "onnx_runner")
    )
