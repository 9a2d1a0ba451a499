"""The napari-sam3 side of the QGIS provider: one job, run in the Python that has napari_sam3.

QGIS never imports napari_sam3: its rasterio, pyogrio and pyproj wheels carry their own GDAL and
PROJ, which must not load into a QGIS process that has loaded its own (rasterio#2291), and its
numpy need not match the one QGIS was built with. The provider starts this file with the
interpreter of the napari-sam3 environment (``runner.py``) and only reads files back.

Protocol: ``python worker.py JOB.json``. Events go to stdout as JSON lines (``progress``,
``info``, ``warning``, ``result``, ``error``, ``cancelled``); anything else the libraries print
goes to stderr. A line ``cancel`` on stdin, or stdin closing, stops the job at the next tile:
nothing is written for a cancelled raster. Exit codes: 0 done, 1 failed, 2 refused, 3 cancelled.

``python worker.py --serve``: the warm engine of the QGIS dock (``engine.py``), alive until
stdin closes or ``shutdown``; versioned requests on stdin and events on stdout, both JSON lines
(``serve.py``, whose docstring is the protocol).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import threading
import traceback
import warnings
from pathlib import Path
from typing import Any

EXIT_CANCELLED = 3

# ConnectionSpec field -> the provider's parameter (the library's messages name the field)
PARAMETERS = {
    "servers": "SERVER",
    "repository": "MODELS",
    "tls": "TLS",
    "root_certificates": "TLS_ROOT_CERT",
    "private_key": "TLS_CLIENT_KEY",
    "certificate_chain": "TLS_CLIENT_CERT",
    "connect_timeout": "CONNECT_TIMEOUT",
    "request_timeout": "REQUEST_TIMEOUT",
    "deadline": "DEADLINE",
    "runtime": "RUNTIME",
    "precision": "PRECISION",
    "threads": "THREADS",
}


class Cancelled(BaseException):
    """The user cancelled (a BaseException, so that no per-scene retry swallows it)."""

    def __init__(self, where: str = "") -> None:
        super().__init__(where)
        self.where = where


def claim_stdout():
    """The real stdout, for events alone: fd 1 (and sys.stdout) then point at stderr, so that
    whatever the libraries print cannot break a line of the protocol."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def import_message(error: ImportError) -> str:
    return (
        f"{sys.executable} cannot import napari_sam3 ({error}): install napari-sam3 "
        "there (pip install napari-sam3), or choose its Python in Settings > Options > "
        "Processing > Providers > napari-sam3"
    )


class Events:
    """JSON lines to the provider on the real stdout; fd 1 itself then points at stderr."""

    def __init__(self) -> None:
        self._out = claim_stdout()
        self.cancel = threading.Event()
        threading.Thread(target=self._watch_stdin, daemon=True).start()

    def _watch_stdin(self) -> None:
        for line in sys.stdin:
            if line.strip() == "cancel":
                break
        self.cancel.set()  # asked, or the provider is gone

    def emit(self, event: str, **fields: Any) -> None:
        self._out.write(json.dumps({"event": event, **fields}, default=str) + "\n")

    def check(self, where: str = "") -> None:
        if self.cancel.is_set():
            raise Cancelled(where)

    def tiles(self, scene: str):
        """A ``progress(done, total)`` for one scene: reports, then stops here if cancelled."""

        def progress(done: int, total: int) -> None:
            self.emit("progress", scene=scene, done=done, total=total)
            self.check(f"{scene}: after tile {done} of {total}")

        return progress


def _connection(job: dict[str, Any]) -> Any:
    from napari_sam3.client.connection import OPTIONS, ConnectionSpec

    try:
        return ConnectionSpec(**job["connection"])
    except ValueError as error:  # named with the provider's parameters: "DEADLINE must be ..."
        message = str(error)
        for field, parameter in PARAMETERS.items():
            message = message.replace(f"{OPTIONS[field]} ({field})", parameter)
        for field in sorted(PARAMETERS, key=lambda f: -len(OPTIONS[f])):
            message = message.replace(OPTIONS[field], PARAMETERS[field])
        raise ValueError(message) from None


def _connect(spec: Any, events: Events) -> Any:
    try:
        client = spec.connect()
    except Exception as error:  # any failure to reach or load the model stops the job
        raise ConnectionError(f"cannot use the model at {spec.where}: {error}") from error
    events.emit("info", message=f"model: {client!r}")
    if client.manifest.random_weights:
        events.emit(
            "warning",
            message="RANDOM WEIGHTS: this model was never trained, its masks are meaningless "
            "(export your SAM3 checkpoint with sam3-export for real results)",
        )
    return client


def _georeferenced(raster: str, name: str) -> Any:
    from napari_sam3.imagery.raster import raster_info

    info = raster_info(raster)
    if info.crs is None:
        raise ValueError(
            f"the raster {name} has no CRS, so its polygons cannot be placed on the map: assign "
            "it one (in QGIS: Layer Properties > Source; or gdal_edit.py -a_srs EPSG:XXXX FILE) "
            "and run again"
        )
    return info


def _what(job: dict[str, Any]) -> list[str]:
    """The keywords, refused early (before the model loads) when nothing at all is asked for."""
    from napari_sam3.prompts.keywords import parse_keywords

    keywords = parse_keywords(job.get("keywords") or "")
    if not keywords and not job.get("concepts") and not job.get("exemplars"):
        raise ValueError(
            f"nothing to look for: KEYWORDS {job.get('keywords') or ''!r} holds no keyword; give "
            "words such as building, water (separated by commas or semicolons)"
            + (", or CONCEPTS / EXEMPLARS" if job["action"] in ("segment_folder", "change") else "")
        )
    return keywords


def _concepts(job: dict[str, Any], client: Any) -> list[Any]:
    """The CONCEPTS files, checked against the model."""
    from napari_sam3.prompts.concept import Concept

    concepts = []
    for path in job.get("concepts") or []:
        try:
            concepts.append(Concept.load_named(path, client.manifest))
        except (ValueError, OSError) as error:
            raise ValueError(f"CONCEPTS {path}: {error}") from error
    return concepts


def _exemplars(job: dict[str, Any]) -> Any:
    exemplars = job.get("exemplars")
    if not exemplars:
        return None
    from napari_sam3.prompts.vector import VectorPrompt

    return VectorPrompt(exemplars["path"], exemplars.get("label_column"))


def _query(
    job: dict[str, Any], keywords: list[str], client: Any, rasters: list[str], settings: Any
) -> Any:
    """The job's Query: keywords, CONCEPTS, the concepts EXEMPLARS encode (once, over all the
    rasters), the thresholds and the post-processing."""
    from napari_sam3.prompts.query import Query
    from napari_sam3.scene.exemplars import scene_exemplar_concepts

    concepts = _concepts(job, client)
    exemplars = _exemplars(job)
    if exemplars is not None:
        concepts += scene_exemplar_concepts(
            client, rasters, exemplars, bands=settings.bands, name=job["exemplars"].get("name")
        )
    thresholds = {k: job[k] for k in ("score_thr", "max_det", "dedup") if job.get(k) is not None}
    return Query(
        keywords=tuple(keywords),
        concepts=tuple(concepts),
        postprocess=_postprocess(job),
        concept_files=tuple(job.get("concepts") or ()),
        **thresholds,
    )


def _settings(job: dict[str, Any]) -> Any:
    from napari_sam3.imagery.bands import parse_bands
    from napari_sam3.scene.settings import SceneSettings

    bands = job.get("bands")
    return SceneSettings(
        bands=parse_bands(bands) if isinstance(bands, str) else bands or None,
        memory_budget=job.get("memory_budget"),
    )


def _postprocess(job: dict[str, Any]) -> Any:
    from napari_sam3.gis.post import PostProcess

    post = PostProcess(min_area_m2=job.get("min_area_m2") or None)
    return post if post.steps else None


def segment(job: dict[str, Any], events: Events) -> None:
    """One raster (or the EXTENT's window of it) -> a file of polygons with provenance."""
    from napari_sam3.scene.budget import describe_plan
    from napari_sam3.scene.driver import segment_to_file

    raster, name = job["raster"], job.get("source_name") or Path(job["raster"]).name
    keywords = _what(job)
    settings = _settings(job)
    _georeferenced(raster, name)
    spec = _connection(job)
    client = _connect(spec, events)
    try:
        events.check()
        query = _query(job, keywords, client, [raster], settings)
        events.check()
        outcome = segment_to_file(
            client,
            raster,
            job["output"],
            query,
            settings,
            progress=events.tiles(name),
            name=name,
            **_journal(job),
        )
    finally:
        client.close()
    if job.get("journal"):  # written: the run's folder (the journal's, the window's VRT) goes
        shutil.rmtree(Path(job["journal"]).parent, ignore_errors=True)
    df = outcome.frame
    if df.attrs["resumed_tiles"]:
        events.emit(
            "info",
            message=f"resumed: {df.attrs['resumed_tiles']} of {len(df.attrs['tiles_run'])} "
            "tiles from the journal of the stopped run",
        )
    events.emit("info", message=describe_plan(df.attrs["memory"]))
    for line in df.attrs["view"].lines():  # what the model was given
        events.emit("info", message=line)
    for text in outcome.warnings:
        events.emit("warning", message=text)
    events.emit("result", path=job["output"], features=len(df), counts=outcome.counts)


def _journal(job: dict[str, Any]) -> dict[str, Any]:
    """segment_to_file's journal options: ``journal``, the provider's folder for this raster
    (inside the run's own folder, which also holds the EXTENT's VRT and is removed once the run
    is written), continued with RESUME and otherwise started afresh (QGIS's output is the
    worker's own file: never there before); without one, the library's default beside the
    output."""
    if not job.get("journal"):
        return {"resume": bool(job.get("resume"))}
    Path(job["journal"]).parent.mkdir(parents=True, exist_ok=True)
    return {"journal": job["journal"], "resume": bool(job.get("resume")), "overwrite": True}


def encode_concept(job: dict[str, Any], events: Events) -> None:
    """EXEMPLARS on a raster -> one portable concept (.npz)."""
    from napari_sam3.scene.exemplars import scene_exemplar_concepts

    raster, name = job["raster"], job.get("source_name") or Path(job["raster"]).name
    settings = _settings(job)
    _georeferenced(raster, name)
    client = _connect(_connection(job), events)
    try:
        concepts = scene_exemplar_concepts(
            client, [raster], _exemplars(job), bands=settings.bands,
            name=job["exemplars"].get("name"),
        )  # fmt: skip
    finally:
        client.close()
    if len(concepts) > 1:
        raise ValueError(
            f"the exemplars fall in {len(concepts)} different tiles of {name}, and a concept is "
            "encoded on one tile: keep them within one model input of each other (set EXTENT "
            "around them), or use segment_exemplars, which applies every tile's concept"
        )
    concepts[0].source = name
    concepts[0].save(job["output"], overwrite=True)  # QGIS's destination: the analyst chose it
    events.emit("result", path=job["output"], concept=repr(concepts[0]))


def segment_folder(job: dict[str, Any], events: Events) -> None:
    """Every raster of a folder -> one output each, with the library's journal and resume."""
    from napari_sam3.cli import RASTER_SUFFIXES
    from napari_sam3.scene.batch import segment_scenes

    folder = Path(job["folder"])
    if not folder.is_dir():
        raise FileNotFoundError(f"INPUT_FOLDER {folder} is not a folder")
    rasters = sorted(
        p
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in RASTER_SUFFIXES
    )
    if not rasters:
        raise ValueError(
            f"folder {folder} holds no rasters (looked for {', '.join(RASTER_SUFFIXES)})"
        )
    keywords = _what(job)
    settings = _settings(job)
    spec = _connection(job)
    client = _connect(spec, events)
    try:  # encoded once, here, so every raster gets the very same concepts
        query = _query(job, keywords, client, [str(p) for p in rasters], settings)
    finally:
        client.close()
    done = 0

    def report(path: Path, status: str, detail: Any) -> None:
        nonlocal done
        done += 1
        if status == "failed":
            events.emit("warning", message=f"FAILED {path.name}: {detail}")
        elif status == "skipped":
            events.emit(
                "info", message=f"{path.name}: finished before ({detail['features']} objects)"
            )
        else:
            events.emit("info", message=f"{path.name}: {detail['features']} objects")
        events.emit("scene", done=done, total=len(rasters))

    def tiles(path: Path, done_tiles: int, total: int) -> None:
        fraction = (done + done_tiles / max(1, total)) / len(rasters)
        events.emit("progress", scene=path.name, done=done_tiles, total=total, fraction=fraction)
        events.check(f"{path.name}: after tile {done_tiles} of {total}")

    result = segment_scenes(
        spec,
        rasters,
        job["output"],
        query,
        settings,
        fmt=job["format"],
        resume=job["resume"],
        overwrite=job["overwrite"],
        report=report,
        progress=tiles,
    )
    events.emit(
        "result",
        path=job["output"],
        done=len(result.done),
        skipped=len(result.skipped),
        failed=len(result.failed),
        failures=result.failed,
    )


def change(job: dict[str, Any], events: Events) -> None:
    """Two dates of one place -> one layer of objects classed new / gone / changed / same /
    unknown (the library's change_to_file: one query, one grid, each date's own stretch)."""
    from napari_sam3.change.run import change_to_file

    rasters = [job["before"], job["after"]]
    names = [job.get("before_name") or Path(job["before"]).name,
             job.get("after_name") or Path(job["after"]).name]  # fmt: skip
    keywords = _what(job)
    settings = _settings(job)
    if job.get("gsd"):
        settings = settings.replace(gsd=float(job["gsd"]))
    for raster, name in zip(rasters, names, strict=True):
        _georeferenced(raster, name)
    client = _connect(_connection(job), events)
    try:
        events.check()
        query = _query(job, keywords, client, rasters, settings)
        events.check()
        options = {k: job[k] for k in ("iou", "changed_iou", "area_factor", "edge") if job.get(k)}
        table, summary, _ = change_to_file(
            client,
            rasters,
            job["output"],
            query,
            settings,
            overwrite=True,  # the job's own temporary file; QGIS's sink is the analyst's
            dates=job.get("dates") or names,
            progress=events.tiles(" -> ".join(names)),
            **options,
        )
    finally:
        client.close()
    for line in summary.lines():
        events.emit("info", message=line)
    counts = table["change"].value_counts().to_dict() if len(table) else {}
    events.emit("result", path=job["output"], features=len(table), counts=counts)


ACTIONS = {
    "segment": segment,
    "encode_concept": encode_concept,
    "segment_folder": segment_folder,
    "change": change,
}


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--serve"]:
        sys.path.insert(0, str(Path(__file__).parent))  # serve.py beside this file (run with -P)
        from serve import serve

        return serve()
    events = Events()
    try:
        import napari_sam3  # noqa: F401
    except ImportError as error:
        events.emit("error", message=import_message(error))
        return 2
    try:
        job = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
        action = ACTIONS[job["action"]]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            action(job, events)
        for text in dict.fromkeys(str(w.message) for w in caught if w.category is UserWarning):
            events.emit("warning", message=text)
        return 0
    except Cancelled as stop:
        events.emit("cancelled", where=stop.where)
        return EXIT_CANCELLED
    except Exception as error:
        from napari_sam3.core.errors import RefusedError, Sam3Error

        expected = (Sam3Error, ValueError, TypeError, OSError, ConnectionError)
        if isinstance(error, expected):  # named with the provider's parameters
            message = str(error).replace(" and with overwrite (--overwrite)", "")
            message = message.replace("resume (--resume)", "RESUME")
        else:  # a bug: the message, and the traceback for the log
            message = f"{type(error).__name__}: {error}"
            traceback.print_exc()
        events.emit("error", message=message)
        return RefusedError.exit_code if isinstance(error, RefusedError) else 1


if __name__ == "__main__":
    code = main(sys.argv)
    # The job is over and its files are closed. The provider waits for this process to end, and
    # the interpreter's teardown spent 0.6 s (of 4.4 s for a tiny-model job) collecting garbage
    # cycles among the libraries' objects, for nothing: frozen, they are skipped.
    gc.freeze()
    raise SystemExit(code)
