"""Runs one ONNX graph with a chosen runtime and precision (embedded engine and `--flavor python`).

Runtimes: ONNX Runtime (CPU, or its CUDA provider where installed) and OpenVINO (CPU), both on
the same `model.onnx`; precisions fp32, bf16 (OpenVINO only, and only where the CPU computes
bf16 natively: AVX512_BF16 or AMX) and int8 (OpenVINO only, on a CPU with AVX2 at least, from the
INT8 IR that `sam3-export --quantize` writes beside a graph: `<graph>/1/int8/model.xml`). Every
runner has the same surface: `run(feed) -> outputs`.

`auto` is a static rule from figures measured on the full-size graphs (docs/benchmarks.md),
so no start pays for a benchmark: OpenVINO before ONNX Runtime on a CPU (fp32: 1.2x on the
encoder), ONNX Runtime where its CUDA provider is present, bf16 only for the graphs in
`BF16_GRAPHS` (those whose end-to-end parity bounds were measured to hold in bf16, see
tests/runtimes) and only on a CPU with native bf16. Where the repository holds a verification
report (`verification.json`, written by `sam3-export`, measured on its own checkpoint against
the PyTorch model), the report replaces that list: per graph, the fastest precision this host
runs natively whose verdict holds (int8 too, where the graph has an INT8 IR: auto never
picks int8 otherwise). Each choice carries the reason it was made.

This file is copied beside each Triton Python model, so it imports nothing from napari_sam3 but
its siblings there (host.py, core/errors.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

if __package__:  # inside napari_sam3
    from napari_sam3.core.errors import BadData, InvalidInput, RunFailed
    from napari_sam3.runtime import host as _host
else:  # the copy beside a Triton Python model, where its siblings are plain modules
    import host as _host
    from errors import BadData, InvalidInput, RunFailed

ONNXRUNTIME = "onnxruntime"
OPENVINO = "openvino"
RUNTIMES = (ONNXRUNTIME, OPENVINO)
FP32 = "fp32"
BF16 = "bf16"
INT8 = "int8"
PRECISIONS = (FP32, BF16, INT8)
AUTO = "auto"

# The bounds a graph at a lower precision is held to, against its reference (fp32 for the bf16
# rule below, the PyTorch model for a verification report): scores within `score`, no keep/drop
# decision flipped at any of `score_thresholds`, every one of the `top` best masks (thresholded
# at `mask_thr`) with IoU >= `mask_iou`, no dedup decision (overlap `dedup`) changed, the best
# interactive candidate kept. bench/bf16_heads.py and sam3_export/verify.py both measure by them.
PARITY_BOUNDS = {
    "score": 0.005,
    "score_thresholds": (0.3, 0.5, 0.7),
    "mask_thr": 0.5,
    "mask_iou": 0.95,
    "top": 50,
    "dedup": 0.85,
    "best_candidate_kept": True,
}
# Graphs that hold in bf16 by PARITY_BOUNDS (docs/benchmarks.md, "Which graphs run in bf16"),
# measured head by head on the inputs a real prompt gives them (bench/bf16_heads.py, full size,
# native and emulated bf16); tests/runtime/test_bf16_parity.py holds the tiny model to its bounds.
# A graph missing here stays fp32 under precision="auto" (unless a verification report decides).
BF16_GRAPHS = frozenset(
    {
        "sam3_unified_encoder",
        "sam3_text",
        "sam3_decoder",
        "sam3_decoder_ct",
        "sam3_concept_encoder",
        "sam3_pvs_decoder",
        "sam3_pvs_decoder_grid",
    }
)
# An INT8 IR runs its quantized operations in int8 and the rest (softmax, norms, ...) in fp32
_OV_PRECISION = {FP32: "f32", BF16: "bf16", INT8: "f32"}
# Where `sam3-export --quantize` writes a graph's INT8 IR, beside its model.onnx, and the
# record of its files' sizes and hashes (also in the manifest, under "int8")
INT8_FOLDER = "int8"
INT8_RECORD = "int8.json"
QUANTIZE_HINT = "make it with `sam3-export --quantize REPOSITORY`"
# The one-line summary names graphs by what they do (docs/serving.md#precision)
SHORT_NAMES = {
    "sam3_unified_encoder": "encoder",
    "sam3_text": "text",
    "sam3_decoder": "decoder",
    "sam3_decoder_ct": "concept decoder",
    "sam3_concept_encoder": "concept encoder",
    "sam3_pvs_decoder": "PVS",
    "sam3_pvs_decoder_grid": "PVS",
}
PRECISION_DOC = "docs/serving.md#precision"

# The verification report of a repository (sam3_export/verify.py writes it; auto reads it)
VERIFICATION_FILE = "verification.json"
VERIFICATION_SUMMARY = "VERIFICATION.md"
VERIFICATION_FORMAT = "napari-sam3 verification"
VERIFICATION_VERSION = 1
VERIFICATION_MAX_BYTES = 4 << 20  # a report of 7 graphs x 3 precisions is a few tens of kB
REPORT_PRECISIONS = PRECISIONS  # the names a report may use (int8: where it is built)
HOLDS, FAILS, NOT_RUN = "holds", "fails", "not run"
VERDICTS = (HOLDS, FAILS, NOT_RUN)
FASTEST_FIRST = (INT8, BF16)  # the lower precisions auto may take from a report, fastest first


class PrecisionUnavailable(InvalidInput):
    """bf16 or int8 was asked for explicitly where it cannot run."""


class GraphCompileError(RunFailed):
    """A runtime could not load or compile a graph."""


def check_choice(runtime: str, precision: str) -> None:
    if runtime not in (*RUNTIMES, AUTO):
        raise InvalidInput(
            f"unknown runtime {runtime!r}; choose one of {', '.join((*RUNTIMES, AUTO))}"
        )
    if precision not in (*PRECISIONS, AUTO):
        raise InvalidInput(
            f"unknown precision {precision!r}; choose one of {', '.join((*PRECISIONS, AUTO))}"
        )


@dataclass(frozen=True)
class Choice:
    runtime: str
    precision: str
    reason: str
    asked: str = AUTO  # the precision the caller asked for: only an explicit bf16 may fail
    basis: str = ""  # what auto followed: VERIFICATION_SUMMARY, or "" for the static rule

    def __str__(self) -> str:
        return f"{self.runtime}/{self.precision}"

    def fell_back(self, why: str) -> Choice:
        """This choice at fp32, because bf16 could not be compiled or verified."""
        return dataclasses.replace(
            self, precision=FP32, reason=f"{self.reason}; fp32 because {why}"
        )


def int8_path(model_dir: str | Path) -> Path:
    """The INT8 IR of the graph whose version folder is `model_dir` (it may not exist)."""
    return Path(model_dir) / INT8_FOLDER / "model.xml"


def has_int8(model_dir: str | Path) -> bool:
    """Whether `sam3-export --quantize` wrote an INT8 IR for this graph (not yet checked)."""
    xml = int8_path(model_dir)
    return xml.is_file() and (xml.parent / INT8_RECORD).is_file()


def int8_files(xml: Path) -> dict[str, Path]:
    return {"model.xml": xml, "model.bin": xml.with_suffix(".bin")}


def file_record(path: Path) -> dict:
    """Size and sha256 of one file (the INT8 record's entry)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def check_int8(model_dir: str | Path, hashes: bool = False) -> Path:
    """The INT8 IR of a graph, checked against the record written with it: sizes always,
    sha256 with `hashes`. A file missing, truncated, replaced or (with `hashes`) altered is
    refused (BadData)."""
    xml = int8_path(model_dir)
    record_path = xml.parent / INT8_RECORD
    what = f"the INT8 IR in {xml.parent}"
    if not record_path.is_file():
        raise BadData(f"{what} is missing (no {INT8_RECORD}); {QUANTIZE_HINT}")
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise BadData(
            f"{what}: its record {INT8_RECORD} is unreadable ({error}); {QUANTIZE_HINT}"
        ) from None
    for name, path in int8_files(xml).items():
        expected = record.get(name) if isinstance(record, dict) else None
        if not isinstance(expected, dict) or not path.is_file():
            raise BadData(f"{what}: {name} is missing or not recorded; {QUANTIZE_HINT}")
        size = path.stat().st_size
        if size != expected.get("bytes"):
            raise BadData(
                f"{what}: {name} is {size:,} bytes but {expected.get('bytes')} were written "
                f"(truncated or replaced?); {QUANTIZE_HINT}"
            )
        if hashes and file_record(path)["sha256"] != expected.get("sha256"):
            raise BadData(f"{what}: {name} does not match its sha256 (damaged); {QUANTIZE_HINT}")
    return xml


def choose(
    graph: str,
    runtime: str = AUTO,
    precision: str = AUTO,
    host: _host.Host | None = None,
    verified: Verification | None = None,
    int8_file: bool = False,
) -> Choice:
    """The runtime and precision `graph` runs at, with the reason, on `host` (this machine by
    default: `host.detect()`; tests pass other machines). `verified`: the repository's report
    (`load_verification`); under `auto` it replaces the static bf16 rule. `int8_file`: the graph
    has an INT8 IR (`has_int8`); int8 runs where asked for, or under `auto` where the report's
    int8 verdict holds."""
    check_choice(runtime, precision)
    host = _host.detect() if host is None else host
    reasons = []
    if runtime == AUTO:
        if host.cuda and precision not in (BF16, INT8):
            runtime = ONNXRUNTIME
            reasons.append("ONNX Runtime's CUDA provider is present")
        elif host.openvino:
            runtime = OPENVINO
            reasons.append("OpenVINO: less CPU time than ONNX Runtime (docs/benchmarks.md)")
        else:
            runtime = ONNXRUNTIME
            reasons.append("OpenVINO is not installed")
    if precision == FP32:
        return Choice(runtime, FP32, "; ".join(reasons + ["fp32 asked for"]), FP32)
    if precision == INT8:
        return _choose_int8(graph, runtime, host, int8_file, reasons)
    if runtime == ONNXRUNTIME:
        if precision == BF16:
            raise PrecisionUnavailable(
                "ONNX Runtime runs these fp32 graphs at fp32 only; bf16 needs runtime='openvino' "
                "(or use precision='fp32' or 'auto')"
            )
        return Choice(runtime, FP32, "; ".join(reasons + ["ONNX Runtime runs fp32"]))
    native, why = host.native_bf16()
    if precision == BF16:
        if not native:
            raise PrecisionUnavailable(
                f"bf16 asked for, but {why}: OpenVINO would silently compute fp32. "
                "Use precision='fp32' (or 'auto', which falls back to fp32 and says so)"
            )
        return Choice(runtime, BF16, "; ".join(reasons + [f"bf16 asked for, {why}"]), BF16)
    if verified is not None:
        return _verified_choice(graph, runtime, reasons, host, verified, int8_file)
    if not native:
        return Choice(runtime, FP32, "; ".join(reasons + [f"fp32 because {why}"]))
    if graph not in BF16_GRAPHS:
        return Choice(runtime, FP32, "; ".join(reasons + ["fp32: not measured to hold in bf16"]))
    return Choice(runtime, BF16, "; ".join(reasons + [why]))


def _choose_int8(
    graph: str, runtime: str, host: _host.Host, int8_file: bool, reasons: list[str]
) -> Choice:
    if runtime == ONNXRUNTIME:
        raise PrecisionUnavailable(
            "int8 runs in OpenVINO only (the INT8 graphs are OpenVINO IR): use runtime='openvino'"
            + ("" if host.openvino else " after `pip install openvino`")
            + " (or precision='fp32' or 'auto')"
        )
    able, why = host.int8()
    if not able:
        raise PrecisionUnavailable(f"int8 asked for, but {why}. Use precision='fp32' (or 'auto')")
    if not int8_file:
        raise PrecisionUnavailable(
            f"int8 asked for, but graph {graph} has no INT8 file in this repository: "
            f"{QUANTIZE_HINT}, or use precision='fp32' (or 'auto')"
        )
    return Choice(runtime, INT8, "; ".join(reasons + [f"int8 asked for, {why}"]), INT8)


def choose_repository(
    graphs: dict[str, Path],
    runtime: str = AUTO,
    precision: str = AUTO,
    host: _host.Host | None = None,
    verified: Verification | None = None,
) -> dict[str, Choice]:
    """`choose` for every graph of a repository (name -> its version folder). int8 asked for
    applies to the graphs that have an INT8 IR; the others run as under `auto`, and say so. A
    repository without any INT8 IR is refused then."""
    check_choice(runtime, precision)
    if precision != INT8:
        return {
            name: choose(name, runtime, precision, host, verified, int8_file=has_int8(folder))
            for name, folder in graphs.items()
        }
    quantized = {name for name, folder in graphs.items() if has_int8(folder)}
    if graphs and not quantized:
        raise PrecisionUnavailable(
            f"int8 asked for, but no graph of this repository has an INT8 file: {QUANTIZE_HINT}, "
            "or use precision='fp32' (or 'auto')"
        )
    choices = {}
    for name in graphs:
        if name in quantized:
            choices[name] = choose(name, runtime, INT8, host, int8_file=True)
        else:
            auto = choose(name, runtime, AUTO, host, verified)
            choices[name] = dataclasses.replace(
                auto, reason=f"{auto.reason}; no INT8 file: as auto", asked=AUTO
            )
    return choices


class VerificationIgnored(UserWarning):
    """A repository's verification report could not be used; auto follows the static rule."""


@dataclass(frozen=True)
class Verification:
    """The verdicts of a repository's report that auto reads: graph -> precision -> verdict."""

    path: Path
    verdicts: dict

    def verdict(self, graph: str, precision: str) -> str:
        return self.verdicts.get(graph, {}).get(precision, NOT_RUN)

    def holding(self, graph: str) -> frozenset[str]:
        return frozenset(p for p, v in self.verdicts.get(graph, {}).items() if v == HOLDS)


class _Damaged(BadData):
    pass


_WARNED: set[tuple] = set()


def load_verification(repository: str | Path) -> Verification | None:
    """The report of `repository` (`verification.json` at its root), or None: none there, or one
    that cannot be trusted (too large, not JSON, another format version, made for other graph
    files or another model), then with a `VerificationIgnored` warning naming it and why. Never
    raises: a report is a file from elsewhere, and auto falls back to the rule without it."""
    path = Path(repository) / VERIFICATION_FILE
    try:
        if not path.exists():
            return None
        stat = path.stat()
        return Verification(path, _checked_verdicts(path, stat.st_size))
    except (_Damaged, OSError, ValueError, TypeError, RecursionError) as error:
        try:
            key = (str(path), *(lambda s: (s.st_size, s.st_mtime_ns))(path.stat()), str(error))
        except OSError:
            key = (str(path), str(error))
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(
                f"ignoring the verification report {path}: {error}. Precision 'auto' follows "
                f"the rule ({PRECISION_DOC}); `sam3-export --verify {path.parent}` writes a new one",
                VerificationIgnored,
                stacklevel=3,
            )
        return None


def _checked_verdicts(path: Path, size: int) -> dict:
    if not path.is_file():
        raise _Damaged("it is not a file")
    if size > VERIFICATION_MAX_BYTES:
        raise _Damaged(f"{size:,} bytes, over the {VERIFICATION_MAX_BYTES:,} a report can be")
    try:
        report = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _Damaged(f"not JSON ({error})") from None
    if not isinstance(report, dict) or report.get("format") != VERIFICATION_FORMAT:
        raise _Damaged(f"not a {VERIFICATION_FORMAT} report")
    version = report.get("version")
    if type(version) is not int or version != VERIFICATION_VERSION:
        raise _Damaged(
            f"format version {str(version)[:20]}; this version of napari-sam3 reads "
            f"version {VERIFICATION_VERSION}"
        )
    manifest = _manifest_model_id(path.parent)
    if manifest is not None and report.get("model_id") != manifest:
        raise _Damaged("it was made for another model (model_id differs from the manifest's)")
    graphs = report.get("graphs")
    if not isinstance(graphs, dict) or not graphs:
        raise _Damaged("it lists no graphs")
    verdicts = {}
    for graph, entry in graphs.items():
        if graph not in SHORT_NAMES:
            raise _Damaged(f"unknown graph {str(graph)[:60]!r}")
        if not isinstance(entry, dict) or not isinstance(entry.get("precisions"), dict):
            raise _Damaged(f"{graph}: no precisions")
        file = Path(path.parent) / graph / "1" / "model.onnx"
        digest = entry.get("digest")
        if not isinstance(digest, str):
            raise _Damaged(f"{graph}: no digest of its graph file")
        if not file.is_file():
            raise _Damaged(f"{graph}: the repository has no such graph file")
        if graph_digest(file) != digest:
            raise _Damaged(f"{graph}: made for other graph files (checksums differ)")
        verdicts[graph] = {}
        for precision, result in entry["precisions"].items():
            if precision not in REPORT_PRECISIONS:
                raise _Damaged(f"{graph}: unknown precision {str(precision)[:20]!r}")
            verdict = result.get("verdict") if isinstance(result, dict) else None
            if verdict not in VERDICTS:
                raise _Damaged(
                    f"{graph} {precision}: verdict {str(verdict)[:20]!r} is not one of {VERDICTS}"
                )
            verdicts[graph][precision] = verdict
    return verdicts


def _manifest_model_id(repository: Path) -> str | None:
    """The manifest's model_id (None: no manifest beside the report, as in a bare graph copy)."""
    path = repository / "sam3_manifest.json"
    if not path.is_file() or path.stat().st_size > VERIFICATION_MAX_BYTES:
        return None
    try:
        value = json.loads(path.read_bytes()).get("model_id")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _runs_natively(precision: str, host: _host.Host, int8_file: bool) -> tuple[bool, str]:
    if precision == BF16:
        return host.native_bf16()
    if precision == INT8:
        return host.int8() if int8_file else (False, "the graph has no INT8 IR")
    if precision not in PRECISIONS:
        return False, f"this version of napari-sam3 runs no {precision} graphs"
    return True, f"{precision} runs here"


def _verified_choice(
    graph: str,
    runtime: str,
    reasons: list[str],
    host: _host.Host,
    verified: Verification,
    int8_file: bool = False,
) -> Choice:
    """Auto by the report: the fastest precision whose verdict holds and that runs natively."""
    holds = verified.holding(graph)
    missed = []
    for precision in FASTEST_FIRST:
        if precision not in holds:
            missed.append(f"{precision} {verified.verdict(graph, precision)}")
            continue
        native, why = _runs_natively(precision, host, int8_file)
        if native:
            why = f"{precision} holds in {VERIFICATION_SUMMARY} ({why})"
            return Choice(
                runtime, precision, "; ".join([*reasons, why]), basis=VERIFICATION_SUMMARY
            )
        missed.append(f"{precision} holds but {why}")
    why = f"fp32 by {VERIFICATION_SUMMARY}: {', '.join(missed)}"
    return Choice(runtime, FP32, "; ".join([*reasons, why]), basis=VERIFICATION_SUMMARY)


def available_precisions(model_dir: str | Path) -> tuple[str, ...]:
    """The precisions the graph in `model_dir` (`<repository>/<graph>/1`) can be run at: fp32 and
    bf16 from its model.onnx (bf16 where the CPU has it natively, or emulated for verification),
    int8 where `sam3-export --quantize` wrote its INT8 IR."""
    return tuple(p for p in PRECISIONS if p != INT8 or has_int8(model_dir))


def summary(choices: dict[str, Choice]) -> str:
    """One short line: 'openvino bf16: encoder, text, PVS; fp32: decoder, ... (rule: docs/...)'.

    One part per distinct runtime and precision, graphs by their short names; the same line in
    `repr(client)`, the CLI and the panel. It ends with what auto followed: the repository's
    verification report ("verified: VERIFICATION.md") or the static rule.
    """
    if not choices:
        return "no ONNX graphs"
    groups: dict[tuple[str, str], list[str]] = {}
    for graph, choice in choices.items():
        names = groups.setdefault((choice.runtime, choice.precision), [])
        name = SHORT_NAMES.get(graph, graph)
        if name not in names:
            names.append(name)
    order = list(SHORT_NAMES.values())
    parts, previous_runtime = [], None
    for (runtime, precision), names in sorted(groups.items(), key=lambda kv: _group_order(kv[0])):
        names.sort(key=lambda n: order.index(n) if n in order else len(order))
        label = precision if runtime == previous_runtime else f"{runtime} {precision}"
        parts.append(f"{label}: {', '.join(names)}")
        previous_runtime = runtime
    return "; ".join(parts) + f" ({basis(choices)})"


def basis(choices: dict[str, Choice]) -> str:
    """What the choices followed: 'verified: VERIFICATION.md' or 'rule: docs/serving.md#...'."""
    if any(choice.basis for choice in choices.values()):
        return f"verified: {VERIFICATION_SUMMARY}"
    return f"rule: {PRECISION_DOC}"


def _group_order(key: tuple[str, str]) -> tuple[int, int]:
    runtime, precision = key
    return RUNTIMES.index(runtime) if runtime in RUNTIMES else 9, -PRECISIONS.index(precision)


def reasons(choices: dict[str, Choice]) -> str:
    """Why, each distinct reason once (the details behind `summary`)."""
    seen: list[str] = []
    for choice in choices.values():
        for part in choice.reason.split("; "):
            if part not in seen:
                seen.append(part)
    return "; ".join(seen)


def default_cache_dir() -> Path:
    """OpenVINO's compiled-model cache, in the user's cache folder."""
    try:
        from platformdirs import user_cache_path

        base = user_cache_path("napari-sam3")
    except ImportError:  # the copy beside a Triton model, in an environment without platformdirs
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "napari-sam3"
    return base / "openvino"


# OpenVINO's folder holds, per graph file, its compiled blob and (bf16) its fp16 IR: a full-size
# repository takes 3-4 GB at one precision. Every re-export adds folders, so the least recently
# used go beyond this bound (a Logic parameter, `openvino_cache_bytes`, changes it).
CACHE_LIMIT_BYTES = 8 * 2**30
CACHE_IN_USE_S = 3600  # a folder used this recently may be another process's: never removed


def _is_graph_folder(folder: Path) -> bool:
    """One of ours: named by `_graph_signature` (32 hex digits); nothing else is ever removed."""
    name = folder.name
    return folder.is_dir() and len(name) == 32 and all(c in "0123456789abcdef" for c in name)


def _folder_use(folder: Path) -> tuple[float, int] | None:
    """(last used, bytes) of a graph folder; None where another process removed it meanwhile."""
    try:
        size = sum(
            f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()
        )
        return folder.stat().st_mtime, size
    except OSError:
        return None


def prune_cache(
    base: Path, keep: Path, max_bytes: int = CACHE_LIMIT_BYTES, now: float | None = None
) -> list[Path]:
    """Remove the least recently used graph folders of OpenVINO's cache `base` until it holds at
    most `max_bytes`; never `keep`, a folder used within `CACHE_IN_USE_S`, or anything not named
    like a graph folder. The folders removed (a removal that fails is skipped)."""
    now = time.time() if now is None else now
    folders = [f for f in base.iterdir() if _is_graph_folder(f)] if base.is_dir() else []
    use = {f: u for f in folders if (u := _folder_use(f)) is not None}
    total = sum(size for _, size in use.values())
    removed = []
    for folder, (used, size) in sorted(use.items(), key=lambda item: item[1][0]):
        if total <= max_bytes:
            break
        if folder.resolve() == keep.resolve() or now - used < CACHE_IN_USE_S:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists():
            total -= size
            removed.append(folder)
    return removed


def _ort_providers() -> list[str]:
    available = _host.detect().ort_providers
    return [p for p in (_host.CUDA_PROVIDER, _host.CPU_PROVIDER) if p in available]


def make_session(path: str, threads: int = 0):
    ort = _host.import_onnxruntime()
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


_CONTENT: dict[tuple, object] = {}  # (path, size, mtime) -> blake2b state of the graph file


def _content_hash(path: Path):
    """blake2b over the graph file's bytes, hashed once per process per file version."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _CONTENT:
        digest = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _CONTENT.clear()  # one file's state at a time is all a start needs again
        _CONTENT[key] = digest
    return _CONTENT[key].copy()


def graph_digest(path: str | Path) -> str:
    """What a verification report names a graph by: its file's bytes (a small graph's weights
    are in it) and the names and sizes of its external data files (a full-size encoder's 1.8 GB
    are not hashed at every start; the manifest's model_id, checked too, names the weights)."""
    path = Path(path)
    digest = _content_hash(path)
    for extra in sorted(path.parent.glob(path.name + ".*")):
        digest.update(f"{extra.name}:{extra.stat().st_size}".encode())
    return digest.hexdigest()


def _graph_signature(path: Path) -> str:
    """A cache folder name that changes whenever the graph or its external data change.

    The graph file itself is hashed (it holds the weights of small graphs; a full-size graph file
    keeps only its structure, its weights lie in external data); external data files are keyed by
    size and modification time, as hashing 1.8 GB at every start would cost seconds. An INT8 IR
    (model.xml, its weights in model.bin) is a file of its own, so it has its own folder.
    """
    digest = _content_hash(path)
    extras = [*path.parent.glob(path.name + ".*")]
    if path.suffix == ".xml" and path.with_suffix(".bin").is_file():
        extras.append(path.with_suffix(".bin"))
    for extra in sorted(extras):
        stat = extra.stat()
        digest.update(f"{extra.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def compiled_precision(reported) -> str:
    """OpenVINO's `INFERENCE_PRECISION_HINT` of a compiled model as "bf16" / "fp32" (another
    type by OpenVINO's own short name). OpenVINO answers a type object (`ov.Type.bf16`, whose
    str() is "<Type: 'bfloat16'>"), so it is compared with OpenVINO's types, never as text."""
    ov = _host.import_openvino()
    for name, ov_type in ((BF16, ov.Type.bf16), (FP32, ov.Type.f32)):
        if reported == ov_type:
            return name
    to_string = getattr(reported, "to_string", None)
    return to_string() if callable(to_string) else str(reported)


def verify_precision(choice: Choice, reported, graph: str) -> Choice:
    """`choice` as OpenVINO compiled it (`reported`: the compiled model's precision hint).

    Under `auto` a graph compiled at another precision than planned runs at what it was
    compiled at, and the choice says so; an explicit precision that did not hold is an error.
    """
    got = compiled_precision(reported)
    if got == choice.precision:
        return choice
    if choice.asked != AUTO:
        raise PrecisionUnavailable(
            f"{choice.asked} asked for, but OpenVINO compiled {graph} at {got} on this CPU "
            f"({_host.detect().native_bf16()[1]}). Use precision='fp32' (or 'auto', which falls "
            "back and says so)"
        )
    return dataclasses.replace(
        choice,
        precision=got,
        reason=f"{choice.reason}; {got} because OpenVINO compiled it at {got}",
    )


def int8_rest(host: _host.Host | None = None) -> str:
    """The precision OpenVINO computes an INT8 IR's floating-point operations in (all but its
    int8 matrix products): bf16 where the CPU computes it natively, else fp32. Measured at full
    size on Zen 4 (2 threads, half the encoder's matrix products in int8): 27.2 CPU-s with the
    rest in bf16, 43.4 in fp32, against 32.5 for the bf16 encoder (docs/benchmarks.md, INT8)."""
    host = _host.detect() if host is None else host
    return BF16 if host.native_bf16()[0] else FP32


def _ov_config(precision: str, threads: int) -> dict:
    hint = _OV_PRECISION[int8_rest() if precision == INT8 else precision]
    config = {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    return config


def openvino_source(path: str | Path, precision: str, folder: Path | None) -> Path:
    """What OpenVINO compiles for a graph at `precision`.

    bf16: the graph as OpenVINO IR with its weights stored in fp16, written once into `folder`
    (the graph's cache folder). Compiled from the fp32 ONNX file, the CPU plugin keeps the fp32
    weights beside its own copy: at full size the encoder held 3.7 GB, from the fp16 IR 2.0 GB,
    the text encoder 2.5 GB and 1.4 GB, at the same speed (bench/bench_memory.py,
    docs/benchmarks.md). fp16 keeps more mantissa than the bf16 the CPU computes in; OpenVINO
    leaves constants outside fp16's range in fp32. fp32 compiles from the ONNX file as exported.
    int8: the graph's INT8 IR, checked against its record (`check_int8`; its hashes too when
    `folder` holds no compiled blob yet).
    """
    path = Path(path)
    if precision == INT8:  # hashed when compiled from it, not when its compiled blob is cached
        return check_int8(path.parent, hashes=folder is None or not any(folder.glob("*.blob")))
    if precision != BF16 or folder is None:
        return path
    xml = folder / "ir-f16" / "model.xml"
    if xml.is_file() and xml.with_suffix(".bin").is_file():
        return xml
    ov = _host.import_openvino()
    partial = Path(tempfile.mkdtemp(prefix=".ir-f16-", dir=folder))
    try:
        model = ov.Core().read_model(str(path))
        ov.save_model(model, str(partial / "model.xml"), compress_to_fp16=True)
        del model
        try:
            os.rename(partial, xml.parent)  # whole, or not at all
        except OSError:  # another process wrote it first: use theirs
            pass
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return xml


def compile_openvino(
    core,
    path: str,
    choice: Choice,
    threads: int = 0,
    graph: str = "",
    folder: Path | None = None,
):
    """(compiled model, the choice as compiled). Under `auto`, a graph that fails to compile in
    bf16 is compiled in fp32 and the choice says why; an explicit bf16 fails. With `folder`, a
    bf16 graph compiles from its fp16 IR (`openvino_source`); if OpenVINO compiles that at fp32
    after all, the graph is compiled again from the ONNX file, so fp32 always means fp32 weights."""

    def compile_at(precision: str):
        source = openvino_source(path, precision, folder)
        return core.compile_model(str(source), "CPU", _ov_config(precision, threads))

    if choice.precision == INT8:
        try:
            return compile_int8(compile_at, graph or path), choice
        except Exception as error:  # noqa: BLE001 - OpenVINO raises its own types
            if choice.asked == INT8:
                raise
            choice = choice.fell_back(f"its INT8 IR could not be used ({_gist(error)})")
    try:
        compiled = compile_at(choice.precision)
    except Exception as error:  # noqa: BLE001 - OpenVINO raises its own types
        if choice.precision != BF16 or choice.asked == BF16:
            raise
        choice = choice.fell_back(f"OpenVINO could not compile it in bf16 ({_gist(error)})")
        compiled = compile_at(FP32)
    planned = choice.precision
    choice = verify_precision(
        choice, compiled.get_property("INFERENCE_PRECISION_HINT"), graph or path
    )
    if planned == BF16 and choice.precision != BF16 and folder is not None:
        compiled = compile_at(FP32)
    return compiled, choice


def compile_int8(compile_at, graph: str):
    """The INT8 IR compiled, refused (PrecisionUnavailable) where OpenVINO compiled none of its
    matrix products or convolutions in int8: it would run in floating point under int8's name."""
    compiled = compile_at(INT8)
    if int8_operations(compiled) == 0:
        raise PrecisionUnavailable(
            f"int8 asked for, but OpenVINO compiled no int8 operation of {graph} on this CPU "
            f"({_host.detect().int8()[1]}). Use precision='fp32' (or 'auto')"
        )
    return compiled


# The operations whose arithmetic INT8 speeds up, by the CPU plugin's layer types
_INT8_LAYERS = ("Convolution", "Deconvolution", "FullyConnected", "MatMul")


def int8_operations(compiled) -> int:
    """How many matrix products and convolutions of a compiled model OpenVINO runs in int8
    (u8/i8): none means the INT8 IR was compiled in floating point after all."""
    count = 0
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        if "layerType" not in info or "runtimePrecision" not in info:
            continue
        layer, runs = (info[k].astype(str) for k in ("layerType", "runtimePrecision"))
        count += layer in _INT8_LAYERS and runs in ("u8", "i8")
    return count


def release_file_pages(paths: list[Path]) -> int:
    """Drop this process's resident pages of the memory-mapped files `paths` (Linux; elsewhere
    nothing): bytes released.

    OpenVINO maps the weights it compiles from (and its compiled-model cache) and keeps them
    mapped after making its own copy, so they stay in RSS although inference never reads them
    again (measured: 1.8 GB on the full-size encoder, back to 0.1 GB after inference). They are
    clean file pages: MADV_PAGEOUT hands them back, and a later read would fault them in again.
    """
    if not paths or not sys.platform.startswith("linux"):
        return 0
    import ctypes

    wanted = {str(p) for p in paths}
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    released = 0
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return 0
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] not in wanted:
            continue
        low, high = (int(x, 16) for x in fields[0].split("-"))
        if libc.madvise(low, high - low, _MADV_PAGEOUT) == 0:
            released += high - low
    return released


_MADV_PAGEOUT = 21  # linux/mman.h (kernel 5.4+; an older kernel answers EINVAL: nothing happens)


class OpenVinoRunner:
    def __init__(
        self,
        path: str,
        choice: Choice,
        threads: int = 0,
        cache_dir: str | Path | None = None,
        graph: str = "",
        cache_limit: int = CACHE_LIMIT_BYTES,
    ) -> None:
        ov = _host.import_openvino()
        core = ov.Core()
        base = Path(cache_dir) if cache_dir else default_cache_dir()
        source = int8_path(Path(path).parent) if choice.precision == INT8 else Path(path)
        self.cache_dir = base / _graph_signature(source)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        os.utime(self.cache_dir)  # used now: the pruning below goes by this time
        core.set_property({"CACHE_DIR": str(self.cache_dir)})
        # Compiled from the path, OpenVINO checks its cache before reading the file: full-size
        # encoder, warm cache 7.4 s and 3.8 GB RSS, against 8.9 s and 5.6 GB through read_model
        # (cold: ~20 s either way). OpenVINO's own key for a path did not see a same-size file
        # rewritten in place (a stale blob answered), hence the signature folder above.
        self.compiled, self.choice = compile_openvino(
            core, path, choice, threads, graph, folder=self.cache_dir
        )
        self.released = release_file_pages(self._mapped_files(Path(path)))
        self.pruned = prune_cache(base, self.cache_dir, cache_limit)
        self.input_names = [p.get_any_name() for p in self.compiled.inputs]
        self.output_names = [p.get_any_name() for p in self.compiled.outputs]
        self.device = "CPU"
        self._request = self.compiled.create_infer_request()
        self._lock = threading.Lock()

    def _mapped_files(self, path: Path) -> list[Path]:
        """The files OpenVINO may have mapped for this graph: its ONNX file and external data,
        its IR, its compiled-model cache."""
        found = [path, *path.parent.glob(path.name + ".*")]
        found += [*self.cache_dir.glob("*.blob"), *self.cache_dir.glob("ir-*/model.*")]
        if self.choice.precision == INT8:
            found += int8_files(int8_path(path.parent)).values()
        return [p.resolve() for p in found if p.is_file()]

    def run(self, feed: dict) -> dict:
        # Inputs are read in place (copying a click's cached features took 4 ms of its ~50);
        # outputs are fresh arrays, the caller's to hold (the heads cache keeps them).
        with self._lock:
            result = self._request.infer(feed, share_inputs=True, share_outputs=False)
        return {p.get_any_name(): np.asarray(v) for p, v in result.items()}


def make_runner(
    path: str | Path,
    runtime: str = AUTO,
    precision: str = AUTO,
    threads: int = 0,
    cache_dir: str | Path | None = None,
    graph: str | None = None,
    choice: Choice | None = None,
    cache_limit: int = CACHE_LIMIT_BYTES,
):
    """A runner for the graph at `path`: `.run(feed) -> {output name: array}`, `.choice` (what
    it runs at, after compiling). `choice` (from `choose`) replaces runtime and precision."""
    path = str(path)
    graph = graph or Path(path).parent.parent.name
    if choice is None:
        verified = load_verification(Path(path).parent.parent.parent) if precision == AUTO else None
        int8_file = precision in (AUTO, INT8) and has_int8(Path(path).parent)
        choice = choose(graph, runtime, precision, verified=verified, int8_file=int8_file)
    try:
        if choice.runtime == OPENVINO:
            runner = OpenVinoRunner(path, choice, threads, cache_dir, graph, cache_limit)
            choice = runner.choice
        else:
            runner = OrtRunner(path, threads)
    except (PrecisionUnavailable, BadData):
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
    `runtime`, `precision`, `intra_op_threads`, `openvino_cache_dir`, `openvino_cache_bytes`
    (the bound of that folder, `CACHE_LIMIT_BYTES` by default). Without `runtime` (a
    repository written before runtimes were a choice) it runs ONNX Runtime at fp32, as then."""

    def __init__(self, model_dir: str, parameters: dict) -> None:
        self.runner = make_runner(
            os.path.join(model_dir, "model.onnx"),
            runtime=parameters.get("runtime", ONNXRUNTIME),
            precision=parameters.get("precision", AUTO),
            threads=int(parameters.get("intra_op_threads", "0")),
            cache_dir=parameters.get("openvino_cache_dir") or None,
            graph=parameters.get("graph_name") or Path(model_dir).parent.name,
            cache_limit=int(parameters.get("openvino_cache_bytes") or CACHE_LIMIT_BYTES),
        )
        self.choice = self.runner.choice
        self.inputs = list(self.runner.input_names)
        self.output_names = list(self.runner.output_names)

    def run(self, inputs: dict, call=None, outputs=None) -> dict:
        missing = sorted(set(self.inputs) - set(inputs))
        if missing:
            raise InvalidInput(f"missing inputs: {', '.join(missing)}")
        return self.runner.run({name: np.asarray(inputs[name]) for name in self.inputs})
