"""Verification at export: a repository's graphs against the PyTorch model they came from.

The model is built from the same checkpoint as the export builds it (random weights from the
recorded seed for `--random-weights` repositories). The library's own pipeline prepares the
inputs (the shipped Sentinel-2 tile and the analyst's `--verify-images`, stretched and
letterboxed; keywords tokenised; a box exemplar, a concept, a click and a box) and records what
every graph is given (`Sam3Client.local` at fp32). Then, graph by graph and precision by
precision, the graph under test runs at that precision, every other graph at fp32, against the
PyTorch modules on exactly those inputs:

- a head (grounding decoder, concept decoder, interactive decoders) on its recorded inputs;
- an upstream graph (encoder, text, concept encoder) through the heads it feeds: its outputs go
  into the fp32 head, the PyTorch model's own outputs into the PyTorch head.

Compared as the postprocess decides (`onnx_runner.PARITY_BOUNDS`, the bounds that decided the
bf16 list): scores, boxes, masks after thresholding, keep/drop at the score thresholds, the
library's dedup, interactive candidates. The verdict per graph and precision ("holds", "fails",
"not run" with the reason) goes into `verification.json` and `VERIFICATION.md` at the
repository root, where `precision="auto"` reads it (`onnx_runner.load_verification`).
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import logging
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from napari_sam3.core import contract
from napari_sam3.core.errors import BadData, InvalidInput, MissingFile
from napari_sam3.core.files import atomic_write_bytes
from napari_sam3.runtime import host as _host
from napari_sam3.runtime import onnx_runner as R

from .verdicts import BOUNDS, candidate_ious, compare, relative, violations

log = logging.getLogger(__name__)

KEYWORDS = ("building", "field")
IMAGE_SUFFIXES = (".tif", ".tiff", ".jp2", ".png", ".jpg", ".jpeg")
# the CPU features the verdicts depend on, recorded with the report
REPORTED_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
)
FINAL_OUTPUTS = (contract.PRED_LOGITS, contract.PVS_DECODER_IOU)


# -- inputs -----------------------------------------------------------------------------------


@dataclass
class Image:
    name: str
    sha256: str  # of the file(s) read
    source: object  # what `Sam3Client.prepare` reads


def _sha256(paths) -> str:
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda f=f: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def shipped_images(image_size: int) -> list[Image]:
    """One model-size tile of the shipped Sentinel-2 scene (true colour)."""
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    files = sentinel2_true_colour()
    rows, cols = min(image_size, 768), min(image_size, 1336)
    raster = read_raster(files, window=np.s_[0:rows, 200 : 200 + cols])
    name = f"Sentinel-2 T33UUU B04/B03/B02 rows 0:{rows} cols 200:{200 + cols}"
    return [Image(name, _sha256(files), raster)]


def image_paths(folder: str | Path) -> list[Path]:
    """The image files of `--verify-images` (not recursive, sorted): what verification runs on
    and INT8 calibration adds; a folder that is missing or holds none is refused."""
    folder = Path(folder)
    if not folder.is_dir():
        raise MissingFile(f"--verify-images: {folder} is not a folder of GeoTIFF/PNG/JPEG images")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise InvalidInput(
            f"--verify-images: {folder} holds no image ({', '.join(IMAGE_SUFFIXES)}); "
            "put GeoTIFF, JPEG 2000, PNG or JPEG files there, or leave the option out"
        )
    return files


def user_images(folder: str | Path) -> list[Image]:
    """The analyst's images: every GeoTIFF, PNG and JPEG in `folder`, each checked readable."""
    from napari_sam3.imagery.raster import raster_info

    files = image_paths(folder)
    images = []
    for path in files:
        if not path.is_file() or path.stat().st_size == 0:
            raise InvalidInput(f"--verify-images: {path} is empty; remove it or replace it")
        try:
            raster_info(path)
        except Exception as error:  # noqa: BLE001 - GDAL's errors for a file it cannot read
            raise BadData(
                f"--verify-images: {path} cannot be read as an image ({error}); remove it or "
                "replace it with a GeoTIFF, PNG or JPEG"
            ) from error
        images.append(Image(path.name, _sha256([path]), path))
    return images


# -- recording the pipeline's inputs -------------------------------------------------------


def record(repository: Path, images: list[Image], threads: int) -> list[dict]:
    """Per image, graph -> [(inputs, outputs)] as the library's own pipeline calls them (fp32)."""
    from napari_sam3 import Sam3Client

    client = Sam3Client.local(repository, threads=threads, precision=R.FP32)
    calls: list[dict] = []
    infer = client.engine.infer
    graphs = set(client.engine.runtime_choices())

    def recording(model_name, inputs, output_names=None):
        outputs = infer(model_name, inputs, output_names)
        if model_name in graphs:
            feed = {k: np.array(v) for k, v in inputs.items()}
            calls[-1].setdefault(model_name, []).append((feed, dict(outputs)))
        return outputs

    client.engine.infer = recording
    try:
        for image in images:
            calls.append({})
            try:
                prepared = client.prepare(image.source)
            except (ValueError, OSError) as error:
                raise BadData(f"verification image {image.name}: {error}") from error
            rows, cols = prepared.rgb.shape[:2]
            box = [0.3 * cols, 0.3 * rows, 0.55 * cols, 0.5 * rows]
            handle = client.image(prepared)
            for keyword in KEYWORDS:
                handle.segment(keyword, score_thr=0.0)
            handle.segment(exemplar_boxes=[box], exemplar_labels=[1], score_thr=0.0)
            concept = handle.encode_exemplars([box], [1])
            handle.segment(concept=concept, score_thr=0.0)
            if client.manifest.interactive_head:
                handle.interactive().add_point((0.6 * cols, 0.4 * rows))
                handle.interactive().add_box([0.2 * cols, 0.55 * rows, 0.45 * cols, 0.8 * rows])
                if contract.PVS_GRID_DECODER in graphs:
                    calls[-1][contract.PVS_GRID_DECODER] = [(_grid_feed(calls[-1], client), {})]
    finally:
        client.close()
        del client.engine.infer  # no cycle left holding the engine's compiled graphs
        del client
        gc.collect()
    return calls


def _grid_feed(calls: dict, client) -> dict:
    """The point-grid decoder's input: the click's features and a diagonal of grid points."""
    feed = {
        k: v for k, v in calls[contract.PVS_DECODER][0][0].items() if k in contract.PVS_FEATURES
    }
    batch, points = contract.PVS_GRID_BATCH, contract.PVS_GRID_POINTS
    s = client.image_size
    xy = np.linspace(0.15 * s, 0.85 * s, batch, dtype=np.float32)
    feed[contract.PVS_POINT_COORDS] = np.stack([xy, xy[::-1]], -1)[:, None, :].repeat(points, 1)
    feed[contract.PVS_POINT_LABELS] = np.ones((batch, points), np.float32)
    return feed


@dataclass
class Plan:
    """What is compared: per image, each head's own inputs, and each upstream call with the
    head inputs it produced (upstream graph -> [(call, head, head call)])."""

    calls: list[dict]
    finals: list[str]
    upstream: dict[str, list[list[tuple[int, str, int]]]] = field(default_factory=dict)


def plan(calls: list[dict], outputs_of: dict[str, list[str]]) -> Plan:
    finals = [g for g, names in outputs_of.items() if set(names) & set(FINAL_OUTPUTS)]
    result = Plan(calls, finals)
    for graph in outputs_of:
        if graph in finals:
            continue
        per_image = []
        for image in calls:
            pairs = []
            for k, (_, out) in enumerate(image.get(graph, [])):
                for head in finals:
                    for j, (feed, _) in enumerate(image.get(head, [])):
                        shared = [n for n in out if n in feed]
                        if shared and all(np.array_equal(out[n], feed[n]) for n in shared):
                            pairs.append((k, head, j))
            per_image.append(pairs)
        result.upstream[graph] = per_image
    return result


# -- the PyTorch side ------------------------------------------------------------------------


def torch_modules(build) -> dict:
    from .pipeline import graph_modules

    return {g.name: g for m in graph_modules(build.has_interactive) for g in m.graph_exports(build)}


def _torch_run(graph_export, feed: dict) -> dict:
    import torch

    from .patches import no_pin_memory

    args = [torch.from_numpy(np.ascontiguousarray(feed[n])) for n in graph_export.input_names]
    with torch.no_grad(), no_pin_memory():
        out = graph_export.module.eval()(*args)
    out = out if isinstance(out, tuple | list) else (out,)
    return {n: t.detach().numpy() for n, t in zip(graph_export.output_names, out, strict=True)}


def references(modules: dict, the_plan: Plan, graphs: list[str]) -> dict:
    """The PyTorch outputs `graphs` are compared with: ("head", image, graph, call), and for an
    upstream graph ("up", image, graph, call) and ("via", image, graph, call, head, head call)."""
    ref: dict = {}
    for i, image in enumerate(the_plan.calls):
        for head in the_plan.finals:
            if head not in graphs:
                continue
            for j, (feed, _) in enumerate(image.get(head, [])):
                ref["head", i, head, j] = _torch_run(modules[head], feed)
        for graph, per_image in the_plan.upstream.items():
            if graph not in graphs:
                continue
            made: dict[int, dict] = {}
            for k, head, j in per_image[i]:
                if k not in made:
                    made[k] = _torch_run(modules[graph], image[graph][k][0])
                    ref["up", i, graph, k] = made[k]
                feed = {**image[head][j][0], **_shared(made[k], image[head][j][0])}
                ref["via", i, graph, k, head, j] = _torch_run(modules[head], feed)
    return ref


def _shared(out: dict, feed: dict) -> dict:
    return {n: v for n, v in out.items() if n in feed}


# -- the graphs under test ----------------------------------------------------------------------


def variants(model_dir: Path, host: _host.Host) -> list[tuple[str, str]]:
    """(precision, how) for every precision the repository has for a graph and this host can run:
    "native", or "emulated" (bf16 rounding inserted into the graph, run in ONNX Runtime)."""
    out = []
    for precision in R.available_precisions(model_dir):
        if precision == R.BF16:
            native, _ = host.native_bf16()
            out.append((precision, "native" if native else "emulated"))
        else:
            out.append((precision, "native"))
    return out


def _runner(repository: Path, graph: str, precision: str, how: str, threads: int, work: Path):
    path = contract.graph_path(repository, graph)
    if how == "emulated":
        from .bf16_emulation import emulated_copy

        path = emulated_copy(path, work / "emulated" / graph, "all")
        return R.make_runner(path, R.ONNXRUNTIME, R.FP32, threads, graph=graph)
    runtime = R.OPENVINO if precision != R.FP32 else R.AUTO
    return R.make_runner(path, runtime, precision, threads, graph=graph)


def _run(runner, feed: dict) -> dict:
    return runner.run({k: feed[k] for k in runner.input_names})


def measure_graph(
    repository: Path,
    graph: str,
    precision: str,
    how: str,
    the_plan: Plan,
    ref: dict,
    fp32_heads,
    size: int,
    thresholds,
    threads: int,
    work: Path,
) -> dict:
    """One graph at one precision, every other at fp32: its entry in the report."""
    entry: dict = {"how": how}
    try:
        runner = _runner(repository, graph, precision, how, threads, work)
    except (R.GraphCompileError, R.PrecisionUnavailable, InvalidInput) as error:
        return {**entry, "verdict": R.NOT_RUN, "reason": f"could not compile it: {error}"}
    entry["ran as"] = str(runner.choice)
    start = time.perf_counter()
    comparisons, features, broken = [], {}, []
    for i, image in enumerate(the_plan.calls):
        if graph in the_plan.finals:
            for j, (feed, _) in enumerate(image.get(graph, [])):
                row = compare(ref["head", i, graph, j], _run(runner, feed), size, thresholds)
                comparisons.append({"image": i, "head": graph, "call": j, **row})
        else:
            made: dict[int, dict] = {}
            for k, head, j in the_plan.upstream[graph][i]:
                if k not in made:
                    made[k] = _run(runner, image[graph][k][0])
                    for name, value in relative(ref["up", i, graph, k], made[k]).items():
                        features[name] = max(features.get(name, 0.0), value)
                feed = {**image[head][j][0], **_shared(made[k], image[head][j][0])}
                got = _run(fp32_heads(head), feed)
                row = compare(ref["via", i, graph, k, head, j], got, size, thresholds)
                comparisons.append({"image": i, "through": head, "call": j, **row})
    for row in comparisons:
        broken += [
            f"image {row['image']} {row.get('head', row.get('through'))}: {v}"
            for v in violations(row)
        ]
    del runner
    gc.collect()
    entry["seconds"] = round(time.perf_counter() - start, 2)
    if not comparisons:
        return {**entry, "verdict": R.NOT_RUN, "reason": "no prompt reached this graph"}
    entry["verdict"] = R.FAILS if broken else R.HOLDS
    entry["reason"] = "; ".join(broken[:6]) if broken else "every comparison within the bounds"
    entry["measured"] = _summary(comparisons)
    if features:
        entry["measured"]["max |d| / max |reference| per output"] = features
    entry["comparisons"] = comparisons
    return entry


def _summary(comparisons: list[dict]) -> dict:
    """The worst of each figure over the comparisons (the report's headline per entry)."""
    out: dict = {}
    ground = [c for c in comparisons if "max |d score|" in c]
    if ground:
        iou_key = f"mask IoU top {BOUNDS['top']}: min / median"
        out["max |d score|"] = max(c["max |d score|"] for c in ground)
        out["max |d box| (px)"] = max(c["max |d box| (px)"] for c in ground)
        out["keep/drop flips"] = sum(
            v for c in ground for k, v in c.items() if k.startswith("flips@")
        )
        out["min mask IoU"] = min(c[iou_key][0] for c in ground)
        out["dedup pair flips"] = sum(
            int(
                c[f"dedup {BOUNDS['dedup']} pair decisions flipped (top {BOUNDS['top']})"].split()[
                    0
                ]
            )
            for c in ground
        )
        out["dedup kept other duplicates"] = sum(not c["dedup kept the same masks"] for c in ground)
    pvs = [c for c in comparisons if "best candidate kept" in c]
    if pvs:
        out["max |d predicted IoU|"] = max(c["max |d predicted IoU|"] for c in pvs)
        out["best candidate changed"] = sum(not c["best candidate kept"] for c in pvs)
        out["min candidate mask IoU"] = min(min(candidate_ious(c)) for c in pvs)
    return out


class _FP32Heads:
    """The heads at fp32, compiled once for the whole run."""

    def __init__(self, repository: Path, threads: int) -> None:
        self.repository, self.threads, self.runners = repository, threads, {}

    def __call__(self, graph: str):
        if graph not in self.runners:
            path = contract.graph_path(self.repository, graph)
            self.runners[graph] = R.make_runner(path, R.AUTO, R.FP32, self.threads, graph=graph)
        return self.runners[graph]


# -- the whole run and the report ------------------------------------------------------------


def checkpoint_identity(manifest, checkpoint: Path | None) -> str:
    if manifest.random_weights:
        return f"random weights seed {manifest.seed}"
    return f"sha256 {_sha256([checkpoint])} ({checkpoint.name})"


def verify(
    repository: str | Path,
    checkpoint: str | Path | None = None,
    images_dir: str | Path | None = None,
    threads: int = 2,
    thresholds=(),
    progress=print,
    graphs: tuple[str, ...] = (),
    precisions: tuple[str, ...] = (),
) -> dict:
    """Verify `repository` (see the module docstring); write and return its report.

    `graphs`, `precisions`: only these (default: every graph of the repository, every precision
    it has and this host can run); the others are "not run" in the report."""
    from .model import build_sam3

    repository = Path(repository)
    manifest = contract.load_manifest(repository)
    if not manifest.random_weights and checkpoint is None:
        raise InvalidInput(
            f"{repository} was exported from checkpoint {manifest.checkpoint}: verifying it needs "
            "that file: sam3-export --verify DIR --checkpoint FILE"
        )
    checkpoint = None if manifest.random_weights else Path(checkpoint)
    from napari_sam3.runtime.postprocess import DEFAULT_SCORE_THR

    # the bounds' thresholds, the library's default and the analyst's
    thresholds = tuple(sorted({*BOUNDS["score_thresholds"], DEFAULT_SCORE_THR, *thresholds}))
    start = time.perf_counter()
    images = shipped_images(manifest.image_size)
    images += user_images(images_dir) if images_dir is not None else []
    host = _host.detect()
    phases = {}
    with tempfile.TemporaryDirectory(prefix="sam3-verify-") as tmp:
        calls = record(repository, images, threads)
        phases["record (library pipeline, fp32)"] = round(time.perf_counter() - start, 1)
        import torch

        if threads:
            torch.set_num_threads(threads)
        build = build_sam3(
            size=manifest.size,
            seed=manifest.seed if manifest.random_weights else None,
            checkpoint=checkpoint,
        )
        modules = torch_modules(build)
        present = [g for g in modules if contract.graph_path(repository, g).is_file()]
        graphs = [g for g in present if not graphs or g in graphs]
        the_plan = plan(calls, {g: modules[g].output_names for g in present})
        ref = references(modules, the_plan, graphs)
        del build, modules
        gc.collect()
        phases["PyTorch model: build and references"] = round(
            time.perf_counter() - start - sum(phases.values()), 1
        )
        heads = _FP32Heads(repository, threads)
        report_graphs = {}
        for graph in graphs:
            path = contract.graph_path(repository, graph)
            entries = {}
            for precision, how in variants(path.parent, host):
                if precisions and precision not in precisions:
                    continue
                entries[precision] = measure_graph(
                    repository, graph, precision, how, the_plan, ref, heads,
                    manifest.image_size, thresholds, threads, Path(tmp),
                )  # fmt: skip
                progress(_line(graph, precision, entries[precision]))
            for precision in R.REPORT_PRECISIONS:
                entries.setdefault(
                    precision,
                    {"verdict": R.NOT_RUN, "reason": _why_not_run(precision, path.parent)},
                )
            report_graphs[graph] = {"digest": R.graph_digest(path), "precisions": entries}
        del heads
    phases["graphs under test (with compiling)"] = round(
        time.perf_counter() - start - sum(phases.values()), 1
    )
    identity = checkpoint_identity(manifest, checkpoint)
    phases["checkpoint sha256"] = round(time.perf_counter() - start - sum(phases.values()), 1)
    report = {
        "format": R.VERIFICATION_FORMAT,
        "version": R.VERIFICATION_VERSION,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "model_id": manifest.model_id,
        "checkpoint": identity,
        "host": {
            "cpu": platform.processor() or platform.machine(),
            "cpu_flags": [f for f in REPORTED_FLAGS if f in host.cpu_flags],
            "native_bf16": host.native_bf16()[0],
            "openvino": host.openvino_version,
        },
        "threads": threads,
        "seconds": round(time.perf_counter() - start, 1),
        "phases (s)": phases,
        "images": [{"name": im.name, "sha256": im.sha256} for im in images],
        "prompts": {
            "keywords": list(KEYWORDS),
            "exemplar": "one box",
            "interactive": "a click, a box",
        },
        "bounds": {**BOUNDS, "score_thresholds": list(thresholds)},
        "graphs": report_graphs,
    }
    write_report(repository, report)
    return report


def _why_not_run(precision: str, model_dir: Path) -> str:
    if precision in R.available_precisions(model_dir):
        return "not asked for in this verification"
    return f"the repository has no {precision} graph"


def _line(graph: str, precision: str, entry: dict) -> str:
    how = f" ({entry['how']})" if entry.get("how") == "emulated" else ""
    head = f"verify {graph} {precision}{how}: {entry['verdict']}"
    measured = entry.get("measured", {})
    figures = ", ".join(f"{k} {_fmt(v)}" for k, v in measured.items() if not isinstance(v, dict))
    return f"{head} ({figures or entry.get('reason', '')})"


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def write_report(repository: Path, report: dict) -> None:
    """verification.json and VERIFICATION.md, each written atomically (replacing the last)."""
    text = json.dumps(report, indent=1, sort_keys=False) + "\n"
    if len(text) > R.VERIFICATION_MAX_BYTES:  # the reader would refuse it: keep the headlines
        for graph in report["graphs"].values():
            for entry in graph["precisions"].values():
                entry.pop("comparisons", None)
        text = json.dumps(report, indent=1) + "\n"
    atomic_write_bytes(repository / R.VERIFICATION_FILE, text.encode(), overwrite=True)
    atomic_write_bytes(
        repository / R.VERIFICATION_SUMMARY, readable(report).encode(), overwrite=True
    )


def readable(report: dict) -> str:
    b = report["bounds"]
    lines = [
        "# Verification of this repository",
        "",
        f"Each graph at each precision (the others at fp32) against the PyTorch model of "
        f"{report['checkpoint']}, {report['created']}, on {len(report['images'])} image(s) "
        f"({', '.join(i['name'] for i in report['images'])}); keywords "
        f"{', '.join(report['prompts']['keywords'])}, a box exemplar, a concept, a click and a box.",
        "",
        f"Bounds: scores within {b['score']}, no keep/drop flip at score "
        f"{'/'.join(str(t) for t in b['score_thresholds'])}, top-{b['top']} mask IoU >= "
        f"{b['mask_iou']} (mask_thr {b['mask_thr']}), no dedup ({b['dedup']}) pair decision "
        "flipped, the best "
        'interactive candidate kept. `precision="auto"` runs each graph at the fastest '
        "precision this machine runs natively whose verdict holds (docs/serving.md#precision).",
        "",
        "| graph | precision | verdict | measured / reason |",
        "| --- | --- | --- | --- |",
    ]
    for graph, entry in report["graphs"].items():
        for precision, result in entry["precisions"].items():
            how = " (emulated)" if result.get("how") == "emulated" else ""
            measured = result.get("measured", {})
            figures = ", ".join(
                f"{k} {_fmt(v)}" for k, v in measured.items() if not isinstance(v, dict)
            )
            detail = figures if result["verdict"] == R.HOLDS else result.get("reason", "")
            detail = detail.replace("|", "\\|")  # inside a table cell
            lines.append(f"| {graph} | {precision}{how} | {result['verdict']} | {detail} |")
    host = report["host"]
    lines += [
        "",
        f"Host: {host['cpu']}, flags {', '.join(host['cpu_flags']) or 'none of note'}, native bf16 "
        f"{'yes' if host['native_bf16'] else 'no'}; {report['threads']} threads, "
        f"{report['seconds']} s. Every figure: verification.json.",
    ]
    return "\n".join(lines) + "\n"
