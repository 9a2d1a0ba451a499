"""Runs one ONNX graph with a chosen runtime and precision (embedded engine and `--flavor python`).

Runtimes: ONNX Runtime (CPU, or its CUDA provider where installed) and OpenVINO (CPU), both on
the same `model.onnx`; precisions fp32 and bf16 (OpenVINO only, and only where the CPU computes
bf16 natively: AVX512_BF16 or AMX). Every runner has the same surface: `run(feed) -> outputs`.

`auto` is a static rule from figures measured on the full-size graphs (docs/benchmarks.md),
so no start pays for a benchmark: OpenVINO before ONNX Runtime on a CPU (fp32: 1.2x on the
encoder), ONNX Runtime where its CUDA provider is present, bf16 only for the graphs in
`BF16_GRAPHS` (those whose end-to-end parity bounds were measured to hold in bf16, see
tests/runtimes) and only on a CPU with native bf16. Each choice carries the reason it was made.

This file is copied beside each Triton Python model, so it imports nothing from napari_sam3.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ONNXRUNTIME = "onnxruntime"
OPENVINO = "openvino"
RUNTIMES = (ONNXRUNTIME, OPENVINO)
FP32 = "fp32"
BF16 = "bf16"
PRECISIONS = (FP32, BF16)
AUTO = "auto"

# Graphs whose end-to-end parity bounds (tests/runtimes/test_bf16_parity.py, and the
# full-size figures in docs/benchmarks.md) hold when they run in bf16. A graph missing here
# stays fp32 under precision="auto". At full size (bf16 emulated, bench/bf16_parity.py) the
# exemplar and concept prompts kept scores within 0.002 but only 1-2 of the top 5: the grounding
# heads and the concept encoder stay fp32 until a per-graph check shows which graph did it.
BF16_GRAPHS = frozenset(
    {
        "sam3_unified_encoder",
        "sam3_text",
        "sam3_pvs_decoder",
        "sam3_pvs_decoder_grid",
    }
)
_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
_OV_PRECISION = {FP32: "f32", BF16: "bf16"}


class PrecisionUnavailable(ValueError):
    """bf16 was asked for explicitly where it cannot run natively."""


class GraphCompileError(RuntimeError):
    """A runtime could not load or compile a graph."""


def check_choice(runtime: str, precision: str) -> None:
    if runtime not in (*RUNTIMES, AUTO):
        raise ValueError(
            f"unknown runtime {runtime!r}; choose one of {', '.join((*RUNTIMES, AUTO))}"
        )
    if precision not in (*PRECISIONS, AUTO):
        raise ValueError(
            f"unknown precision {precision!r}; choose one of {', '.join((*PRECISIONS, AUTO))}"
        )


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> tuple[bool, str]:
    """(whether this CPU computes bf16 natively, why). OpenVINO's own capability list must agree:
    without it, OpenVINO silently runs fp32 whatever precision hint it is given."""
    return _native_bf16(cpu_flags() if flags is None else flags)


@functools.lru_cache(maxsize=8)
def _native_bf16(flags: frozenset[str]) -> tuple[bool, str]:
    present = [f for f in _BF16_CPU_FLAGS if f in flags]
    if not present:
        return False, "this CPU has neither AVX512_BF16 nor AMX (no avx512_bf16/amx_bf16 flag)"
    try:
        import openvino as ov

        capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    except ImportError:
        return True, f"CPU flags {', '.join(present)}"
    if "BF16" not in capabilities:
        return False, f"OpenVINO does not list BF16 for this CPU (flags {', '.join(present)})"
    return True, f"CPU flags {', '.join(present)}; OpenVINO lists BF16"


def _has_openvino() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def _ort_providers() -> list[str]:
    import onnxruntime as ort

    return [
        p
        for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
        if p in ort.get_available_providers()
    ]


@dataclass(frozen=True)
class Choice:
    runtime: str
    precision: str
    reason: str

    def __str__(self) -> str:
        return f"{self.runtime}/{self.precision}"


def choose(
    graph: str,
    runtime: str = AUTO,
    precision: str = AUTO,
    *,
    bf16: tuple[bool, str] | None = None,
    openvino_installed: bool | None = None,
    cuda: bool | None = None,
) -> Choice:
    """The runtime and precision `graph` runs at, with the reason. The keyword arguments
    override what is detected on this machine (tests, other machines' rules)."""
    check_choice(runtime, precision)
    reasons = []
    if runtime == AUTO:
        cuda = "CUDAExecutionProvider" in _ort_providers() if cuda is None else cuda
        openvino_installed = _has_openvino() if openvino_installed is None else openvino_installed
        if cuda and precision != BF16:
            runtime = ONNXRUNTIME
            reasons.append("ONNX Runtime's CUDA provider is present")
        elif openvino_installed:
            runtime = OPENVINO
            reasons.append(
                "OpenVINO: less CPU time than ONNX Runtime on the full-size encoder "
                "(1.14-1.19x, docs/benchmarks.md)"
            )
        else:
            runtime = ONNXRUNTIME
            reasons.append("OpenVINO is not installed")
    if precision == FP32:
        return Choice(runtime, FP32, "; ".join(reasons + ["fp32 asked for"]))
    if runtime == ONNXRUNTIME:
        if precision == BF16:
            raise PrecisionUnavailable(
                "ONNX Runtime runs these fp32 graphs at fp32 only; bf16 needs runtime='openvino' "
                "(or precision='fp32' / 'auto')"
            )
        return Choice(runtime, FP32, "; ".join(reasons + ["ONNX Runtime runs fp32"]))
    native, why = native_bf16() if bf16 is None else bf16
    if precision == BF16:
        if not native:
            raise PrecisionUnavailable(
                f"bf16 asked for, but {why}: OpenVINO would silently compute fp32. "
                "Use precision='fp32' (or 'auto', which falls back and says so)"
            )
        return Choice(runtime, BF16, "; ".join(reasons + [f"bf16 asked for ({why})"]))
    if not native:
        return Choice(runtime, FP32, "; ".join(reasons + [f"fp32 because {why}"]))
    if graph not in BF16_GRAPHS:
        return Choice(
            runtime, FP32, "; ".join(reasons + [f"fp32: {graph} is not measured to hold in bf16"])
        )
    return Choice(runtime, BF16, "; ".join(reasons + [f"bf16: native ({why})"]))


def default_cache_dir() -> Path:
    """OpenVINO's compiled-model cache, in the user's cache folder."""
    try:
        from platformdirs import user_cache_path

        base = user_cache_path("napari-sam3")
    except ImportError:  # the copy beside a Triton model, in an environment without platformdirs
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "napari-sam3"
    return base / "openvino"


def make_session(path: str, threads: int = 0):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(path, options, providers=_ort_providers())


class OrtRunner:
    def __init__(self, path: str, threads: int = 0) -> None:
        self.session = make_session(path, threads)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.device = "GPU" if self.session.get_providers()[0].startswith("CUDA") else "CPU"

    def run(self, feed: dict) -> dict:
        outputs = self.session.run(self.output_names, feed)
        return dict(zip(self.output_names, outputs, strict=True))


def _graph_signature(path: Path) -> str:
    """A cache folder name that changes whenever the graph or its external data change.

    The graph file itself is hashed (it holds the weights of small graphs; a full-size graph file
    keeps only its structure, its weights lie in external data); external data files are keyed by
    size and modification time, as hashing 1.8 GB at every start would cost seconds.
    """
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    for extra in sorted(path.parent.glob(path.name + ".*")):
        stat = extra.stat()
        digest.update(f"{extra.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


class OpenVinoRunner:
    def __init__(
        self, path: str, precision: str, threads: int = 0, cache_dir: str | Path | None = None
    ) -> None:
        import openvino as ov

        core = ov.Core()
        base = Path(cache_dir) if cache_dir else default_cache_dir()
        self.cache_dir = base / _graph_signature(Path(path))
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        core.set_property({"CACHE_DIR": str(self.cache_dir)})
        config = {
            "INFERENCE_PRECISION_HINT": _OV_PRECISION[precision],
            "PERFORMANCE_HINT": "LATENCY",
        }
        if threads:
            config["INFERENCE_NUM_THREADS"] = int(threads)
        # Compiled from the path, OpenVINO checks its cache before reading the file: full-size
        # encoder, warm cache 7.4 s and 3.8 GB RSS, against 8.9 s and 5.6 GB through read_model
        # (cold: ~20 s either way). OpenVINO's own key for a path did not see a same-size file
        # rewritten in place (a stale blob answered), hence the signature folder above.
        self.compiled = core.compile_model(path, "CPU", config)
        compiled_precision = str(self.compiled.get_property("INFERENCE_PRECISION_HINT"))
        if precision == BF16 and "bf16" not in compiled_precision:
            raise PrecisionUnavailable(
                f"OpenVINO compiled {path} at {compiled_precision}, not bf16, on this CPU"
            )
        self.input_names = [p.get_any_name() for p in self.compiled.inputs]
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]
        self.device = "CPU"
        self._request = self.compiled.create_infer_request()
        self._lock = threading.Lock()

    def run(self, feed: dict) -> dict:
        with self._lock:
            result = self._request.infer(feed, share_inputs=False, share_outputs=False)
        return {p.get_any_name(): np.asarray(v) for p, v in result.items()}


def make_runner(
    path: str | Path,
    runtime: str = AUTO,
    precision: str = AUTO,
    threads: int = 0,
    cache_dir: str | Path | None = None,
    graph: str | None = None,
):
    """A runner for the graph at `path`: `.run(feed) -> {output name: array}`, `.choice`."""
    path = str(path)
    graph = graph or Path(path).parent.parent.name
    choice = choose(graph, runtime, precision)
    try:
        if choice.runtime == OPENVINO:
            runner = OpenVinoRunner(path, choice.precision, threads, cache_dir)
        else:
            runner = OrtRunner(path, threads)
    except PrecisionUnavailable:
        raise
    except ImportError as error:
        raise GraphCompileError(
            f"{graph}: runtime {choice.runtime} is not installed ({error}); "
            f"`pip install {choice.runtime}` or choose runtime='{ONNXRUNTIME}'"
        ) from error
    except Exception as error:  # noqa: BLE001 - both runtimes raise their own types
        other = OPENVINO if choice.runtime == ONNXRUNTIME else ONNXRUNTIME
        raise GraphCompileError(
            f"graph {graph} ({path}) failed to compile in {choice.runtime}: {_gist(error)}. "
            f"Re-export the repository, or try runtime='{other}'"
        ) from error
    runner.choice = choice
    runner.graph = graph
    return runner


def _gist(error: Exception) -> str:
    """The informative lines of a runtime's error (OpenVINO's start with source locations)."""
    lines = [
        line.strip()
        for line in str(error).splitlines()
        if line.strip() and not line.startswith(("Exception from ", "Check 'false' failed"))
    ]
    return " ".join(lines)[:400] or type(error).__name__


class Logic:
    """The Python-backend model (and embedded runner) of one ONNX graph. Config parameters:
    `runtime`, `precision`, `intra_op_threads`, `openvino_cache_dir`. Without `runtime` (a
    repository written before runtimes were a choice) it runs ONNX Runtime at fp32, as then."""

    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.runner = make_runner(
            os.path.join(model_dir, "model.onnx"),
            runtime=parameters.get("runtime", ONNXRUNTIME),
            precision=parameters.get("precision", AUTO),
            threads=int(parameters.get("intra_op_threads", "0")),
            cache_dir=parameters.get("openvino_cache_dir") or None,
            graph=parameters.get("graph_name") or Path(model_dir).parent.name,
        )
        self.choice = self.runner.choice
        self.inputs = list(self.runner.input_names)
        self.output_names = list(self.runner.output_names)

    def run(self, inputs: dict, call=None) -> dict:
        missing = sorted(set(self.inputs) - set(inputs))
        if missing:
            raise ValueError(f"missing inputs: {', '.join(missing)}")
        return self.runner.run({name: np.asarray(inputs[name]) for name in self.inputs})
