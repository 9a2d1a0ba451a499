"""`Sam3Client`: the notebook API, and what the napari widgets call underneath.

One client talks to one model repository, either on a Triton server (`Sam3Client("host:8001")`)
or in-process (`Sam3Client.local("model_repository/")`). Both run the same graphs, ensembles and
postprocess, so they return the same DataFrames.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from napari_sam3.client.cache import FeatureCacheClient, ModelChanged, ModelSwitched, model_changed
from napari_sam3.client.connection import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    Timeouts,
)
from napari_sam3.client.image import ImageHandle
from napari_sam3.client.results import decode_answer, detections_frame, empty_result, max_detections
from napari_sam3.core import contract, validate
from napari_sam3.core.errors import BadData, InvalidInput, InvalidType
from napari_sam3.imagery.letterbox import Letterbox
from napari_sam3.imagery.raster import Raster, raster_info, read_raster
from napari_sam3.imagery.stretch import to_model_rgb
from napari_sam3.prompts.concept import Concept
from napari_sam3.prompts.query import DEFAULT_DEDUP, Query
from napari_sam3.prompts.tokenizer import tokenize
from napari_sam3.runtime.engines.local import LocalEngine
from napari_sam3.runtime.engines.protocol import Engine, checked_engine
from napari_sam3.runtime.onnx_runner import SHORT_NAMES

ImageLike = str | os.PathLike | np.ndarray | Raster


def _on_the_served_model(method):
    """Run a call on pixels once more when the server turned out to serve another model than
    the one it was prepared for (the client follows the server in between; see cache.py)."""

    @functools.wraps(method)
    def run(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except ModelSwitched:
            if self._features.is_pinned:  # for something made with the old model (a handle)
                raise
            return method(self, *args, **kwargs)

    return run


@dataclass
class PreparedImage:
    """An image as the model sees it, with the mapping back to its own pixels."""

    rgb: np.ndarray  # (rows, cols, 3) uint8, the stretched original
    letterbox: Letterbox
    images_u8: np.ndarray  # [1, 3, S, S]


class Sam3Client:
    def __init__(
        self,
        address: str | Sequence[str] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retries: int = 3,
        *,
        deadline: float | None = None,
        tls: bool = False,
        root_certificates: str | os.PathLike | None = None,
        private_key: str | os.PathLike | None = None,
        certificate_chain: str | os.PathLike | None = None,
        liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
        engine: Engine | None = None,
    ) -> None:
        """A Triton server's gRPC address, ``host:port``; several (a list, or ``"a:8001,b:8001"``)
        make a pool (engines/pool.py) that spreads requests and survives a server's loss. Or,
        instead of an address, `engine`: any object offering the
        :class:`~napari_sam3.runtime.engines.Engine` members (a ``LocalEngine`` made with its
        own settings, a wrapper around one); the client closes it when closed (where the
        client cannot be made, it is left open for the caller).

        `connect_timeout`: how long to wait for a ready server; `request_timeout`: the most one
        request try may take (the client gives up sooner, after `liveness_timeout` seconds, on a
        server that stops answering); `deadline`: all tries of one call together (default 1.5 x
        `request_timeout`). `napari_sam3.client.connection.ConnectionSpec` holds these and makes the
        client (the CLI, the panel and batch workers use it). `tls=True` for a server behind TLS: `root_certificates`
        is the CA file to trust (default: the system's), `private_key` and
        `certificate_chain` the client's certificate where the server asks for one.
        """
        if engine is not None:
            if address is not None:
                raise InvalidInput("pass an address or an engine, not both")
            self.engine = checked_engine(engine)
            self._load_manifest()
            return
        if address is None:
            raise InvalidInput(
                "pass a Triton address ('host:8001'), or an engine; for the embedded engine use "
                "Sam3Client.local(repository)"
            )
        from napari_sam3.runtime.engines.pool import PoolEngine, split_addresses
        from napari_sam3.runtime.engines.triton import TlsOptions, TritonEngine

        given = (root_certificates, private_key, certificate_chain)
        if not tls and any(v is not None for v in given):
            raise InvalidInput("certificate files are for TLS: pass tls=True with them")
        timeouts = Timeouts(connect_timeout, request_timeout, deadline, liveness_timeout, retries)
        tls_options = TlsOptions(*given) if tls else None
        addresses = split_addresses(address)
        if len(addresses) > 1:  # a pool: requests spread, a dead server's retried elsewhere
            self.engine = PoolEngine(addresses, timeouts, tls=tls_options)
        else:
            self.engine = TritonEngine(addresses[0], timeouts, tls=tls_options)
        try:
            self._load_manifest()
        except BaseException:
            self.engine.close()
            raise

    @classmethod
    def local(
        cls,
        repository: str | os.PathLike,
        threads: int = 0,
        cache_bytes: int | None = None,
        runtime: str = "auto",
        precision: str = "auto",
    ) -> Sam3Client:
        """The embedded engine: the repository run in-process.

        `cache_bytes`: the bound of the in-process feature cache (default: the repository's
        `sam3_cached` config, four full-size images); it must hold at least one image.
        `runtime`: "openvino" (CPU), "onnxruntime" (CPU, or CUDA where installed) or "auto";
        `precision`: "fp32", "bf16" (OpenVINO on a CPU with native bf16 only), "int8" (OpenVINO,
        the graphs quantized by `sam3-export --quantize`; the others as auto) or "auto".
        `repr(client)` and `client.engine.runtime_summary(reasons=True)` say what was picked.
        """
        overrides = {}
        if cache_bytes is not None:
            cache_bytes = validate.positive_int("cache_bytes", cache_bytes, 2**62)
            overrides[contract.CACHED] = {"cache_bytes": cache_bytes}
        engine = LocalEngine(
            repository,
            threads=threads,
            model_parameters=overrides,
            runtime=runtime,
            precision=precision,
        )
        try:
            return cls(engine=engine)
        except BaseException:
            engine.close()
            raise

    def _load_manifest(self) -> None:
        self._previous_models: set[str] = set()  # models this client served before a change
        self._read_manifest()
        self._features = FeatureCacheClient(
            self.engine,
            self.model_id,
            on_change=self._follow_model,
            remote=not self.engine.local,
        )
        self._features.info()  # the cache model loads now: a bad bound fails here, not later

    def _read_manifest(self) -> None:
        manifest = contract.manifest_from_config(self.engine.config(contract.SEGMENT))
        try:
            self.engine.config(contract.CACHED)
        except ValueError:
            raise InvalidInput(
                f"{self.address} serves no {contract.CACHED} model (a repository written by an "
                "older sam3-export, or the model failed to load: see the server log): export "
                "the repository again"
            ) from None
        self.manifest = manifest
        self.image_size = manifest.image_size
        self.model_id = manifest.model_id

    def _follow_model(self, served: str) -> str:
        """The server serves another model now (restarted on another repository): forget its
        configs, read the manifest again; the model id this client serves from now on."""
        old = self.model_id
        self.engine.refresh()
        self._read_manifest()
        if self.model_id != old:
            self._previous_models.add(old)
            self._previous_models.discard(self.model_id)
        return self.model_id

    def _describe_model(self) -> str:
        m = self.manifest
        weights = "random weights" if m.random_weights else "checkpoint"
        return f" ({m.size}, {m.image_size} px input, {weights})"

    def _changed(self, old: str, what: str, todo: str) -> ModelChanged:
        """The error for `what`, made with model `old`, on the model this client serves now."""
        return model_changed(self.address, old, self.model_id, what, todo, self._describe_model())

    def _check_concept(self, concept: Concept) -> None:
        if concept.model_id != self.model_id and concept.model_id in self._previous_models:
            raise self._changed(
                concept.model_id,
                f"concept {concept.name or '(unnamed)'}",
                "re-encode it on the new model (encode_exemplars with its exemplar boxes)",
            )
        concept.check_model(self.model_id)

    @property
    def address(self) -> str:
        return self.engine.address

    def close(self) -> None:
        """Close the gRPC channels (Triton) or release the ONNX Runtime sessions (embedded)."""
        features = getattr(self, "_features", None)
        if features is not None:
            features.close()  # no answer from the client's cache after close either
        self.engine.close()

    def __enter__(self) -> Sam3Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        weights = "RANDOM WEIGHTS" if self.manifest.random_weights else "checkpoint"
        summary = self.engine.runtime_summary()
        runs = f", runtime={summary}" if summary else ""
        loaded = self.engine.loaded_graphs()
        if loaded is not None:
            order = list(SHORT_NAMES)  # encoder, text, decoders, PVS
            loaded = sorted(loaded, key=lambda n: order.index(n) if n in order else len(order))
            short = dict.fromkeys(SHORT_NAMES.get(name, name) for name in loaded)
            runs += f", loaded={', '.join(short) or 'nothing yet'}"
        return (
            f"Sam3Client({self.address!r}, size={self.manifest.size}, "
            f"input={self.image_size}px, {weights}, model_id={self.model_id[:12]}{runs})"
        )

    # -- inputs ---------------------------------------------------------------------------
    def prepare(self, image: ImageLike, bands: Sequence[int | str] | None = None) -> PreparedImage:
        """Any raster path or array -> the letterboxed uint8 model input."""
        if isinstance(image, str | os.PathLike):
            info = raster_info(Path(image))  # the size first: nothing is read past the bound
            validate.image_side(info.rows, info.cols, f"raster {Path(image).name}")
            validate.image_pixels(info.rows, info.cols, f"raster {Path(image).name}")
            image = read_raster(Path(image), bands=bands)
            # read as asked: all of it, in that order (None lets the file's colours decide)
            bands = None if bands is None else list(range(1, image.data.shape[0] + 1))
        elif isinstance(image, Raster | np.ndarray):
            rows, cols = _plane_shape(image)
            validate.image_pixels(rows, cols)
        if isinstance(image, Raster):
            rgb = to_model_rgb(image, bands=bands)
        elif isinstance(image, np.ndarray):
            rgb = to_model_rgb(image, bands=bands)
        else:
            raise InvalidType(
                f"image must be a raster path, a numpy array or a Raster, got {type(image).__name__}"
            )
        letterbox = Letterbox(rgb.shape[:2], self.image_size)
        return PreparedImage(rgb, letterbox, letterbox.apply(rgb))

    def _as_prepared(self, image: ImageLike | PreparedImage, bands=None) -> PreparedImage:
        if isinstance(image, PreparedImage):
            if image.images_u8.shape[-1] != self.image_size:
                if self._previous_models:  # the server was restarted on another repository
                    raise ModelChanged(
                        f"the server at {self.address} now serves model {self.model_id[:12]}"
                        f"{self._describe_model()}; this image was prepared for the "
                        f"{image.images_u8.shape[-1]} px input of the model it served before: "
                        "prepare it again (client.image(...) or client.prepare(...))",
                        address=self.address,
                        new_model_id=self.model_id,
                    )
                raise InvalidInput("this PreparedImage was made for another model size")
            return image
        return self.prepare(image, bands)

    def _exemplar_slots(self, letterbox: Letterbox, boxes, labels) -> dict[str, np.ndarray]:
        k = self.manifest.exemplar_slots
        slots = {
            contract.EXEMPLAR_BOXES: np.zeros((1, k, 4), np.float32),
            contract.EXEMPLAR_LABELS: np.zeros((1, k), np.int64),
            contract.EXEMPLAR_VALID: np.zeros((1, k), np.bool_),
        }
        if boxes is None:
            if labels is not None:
                raise InvalidInput("exemplar_labels given without exemplar_boxes")
            return slots
        rows, cols = letterbox.image_shape
        boxes = validate.exemplar_boxes(boxes, size=(cols, rows))
        if len(boxes) > k:
            raise InvalidInput(f"at most {k} exemplar boxes fit one request, got {len(boxes)}")
        if labels is None:
            labels = np.ones(len(boxes), np.int64)
        labels = validate.exemplar_labels(labels, len(boxes))
        n = len(boxes)
        slots[contract.EXEMPLAR_BOXES][0, :n] = letterbox.boxes_to_model(boxes)
        slots[contract.EXEMPLAR_LABELS][0, :n] = labels.astype(np.int64)
        slots[contract.EXEMPLAR_VALID][0, :n] = True
        return slots

    @staticmethod
    def _thresholds(score_thr, mask_thr, max_det) -> dict[str, np.ndarray]:
        options = {}
        if score_thr is not None:
            score_thr = validate.unit_interval("score_thr", score_thr)
            options[contract.SCORE_THR] = np.array([score_thr], np.float32)
        if mask_thr is not None:
            mask_thr = validate.unit_interval("mask_thr", mask_thr, open_low=True, open_high=True)
            options[contract.MASK_THR] = np.array([mask_thr], np.float32)
        if max_det is not None:
            max_det = validate.positive_int("max_det", max_det, validate.INT32_MAX)
            options[contract.MAX_DET] = np.array([max_det], np.int32)
        return options

    # -- grounding --------------------------------------------------------------------------
    @_on_the_served_model
    def segment(
        self,
        image: ImageLike | PreparedImage,
        prompt: str | Query | None = None,
        exemplar_boxes=None,
        exemplar_labels=None,
        concept: Concept | None = None,
        score_thr: float | None = None,
        mask_thr: float | None = None,
        max_det: int | None = None,
        dedup: float | None = DEFAULT_DEDUP,
        bands: Sequence[int | str] | None = None,
        exemplars=None,
    ) -> pd.DataFrame:
        """Everything `prompt` (and/or the exemplar boxes, or a concept) names in the image.

        `prompt` may be a :class:`~napari_sam3.prompts.query.Query` (keywords, concepts,
        exemplars and thresholds in one value; the other arguments but `bands` stay unset):
        its keywords and concepts share one vision pass (:meth:`find`).

        `exemplars`: exemplar boxes from vector data in any CRS (a vector file, a GeoDataFrame
        or a `vector_prompts.VectorPrompt` with a label column); the image must then be
        georeferenced (a raster path or a Raster). They add to `exemplar_boxes`.

        Returns one row per object: `box` [x1, y1, x2, y2] in the image's pixels, `score`,
        `mask` (full-frame, dense on access), `keyword`, `prompt_kind`.
        """
        if isinstance(prompt, Query):
            given = [
                name
                for name, value in (
                    ("exemplar_boxes", exemplar_boxes),
                    ("exemplar_labels", exemplar_labels),
                    ("concept", concept),
                    ("score_thr", score_thr),
                    ("mask_thr", mask_thr),
                    ("max_det", max_det),
                    ("exemplars", exemplars),
                )
                if value is not None
            ] + ([] if dedup == DEFAULT_DEDUP else ["dedup"])
            if given:
                raise InvalidInput(
                    f"{', '.join(given)} given beside a Query: put them in the Query "
                    "(query.replace(...))"
                )
            return self.find(image, prompt, bands=bands)
        if exemplars is not None:
            exemplar_boxes, exemplar_labels = _vector_exemplars(
                image, exemplars, exemplar_boxes, exemplar_labels
            )
        limits = {"score_thr": score_thr, "mask_thr": mask_thr, "max_det": max_det, "dedup": dedup}
        boxes = {"exemplar_boxes": exemplar_boxes, "exemplar_labels": exemplar_labels}
        query = Query.of(prompt, concept=concept, **boxes, **limits)
        return self._ground(self._as_prepared(image, bands), query)

    @_on_the_served_model
    def find(
        self,
        image: ImageLike | PreparedImage,
        query: Query,
        bands: Sequence[int | str] | None = None,
        per_request: int | None = None,
    ) -> pd.DataFrame:
        """Everything a :class:`~napari_sam3.prompts.query.Query` names in the image.

        One keyword (with or without exemplar boxes) is one grounding pass; several keywords
        and concepts share one vision pass, at most `per_request` (default the model's
        `max_keywords`) in a request. Vector exemplars are turned into boxes on the image
        (which must be georeferenced). `df.attrs["requests"]` lists (queries, mask bytes) per
        request: what scene runs plan their memory from.
        """
        if not isinstance(query, Query):
            raise InvalidType(f"query must be a Query, got {type(query).__name__}")
        if query.exemplars is not None:
            boxes, labels = _vector_exemplars(
                image, query.exemplars, query.exemplar_boxes or None, query.exemplar_labels or None
            )
            query = query.replace(exemplars=None, exemplar_boxes=boxes, exemplar_labels=labels)
        return run_query(self, self._as_prepared(image, bands), query, per_request)

    def _ground(self, prepared: PreparedImage, query: Query) -> pd.DataFrame:
        """One grounding pass: the query's one keyword, exemplar boxes or one concept."""
        prompt = query.keywords[0] if query.keywords else None
        boxes = (
            np.asarray(query.exemplar_boxes, np.float64).reshape(-1, 4)
            if query.exemplar_boxes
            else None
        )
        labels = np.asarray(query.exemplar_labels, np.int64) if query.exemplar_boxes else None
        inputs = {
            contract.IMAGES: prepared.images_u8,
            contract.TOKEN_IDS: tokenize(prompt if prompt is not None else contract.VISUAL_PROMPT),
            **self._thresholds(query.score_thr, query.mask_thr, query.max_det),
        }
        if query.concepts:
            concept = query.concepts[0]
            self._check_concept(concept)
            inputs.update(concept.inputs(self.manifest))
            kind = "concept"
        else:
            inputs.update(self._exemplar_slots(prepared.letterbox, boxes, labels))
            kind = "text" if boxes is None else "exemplar"
            if prompt is not None and boxes is not None:
                kind = "text+exemplar"
        # the features of an image seen before are reused (sam3_cached; see cache.py)
        out, status = self._features.ground(prepared, inputs)
        frame = detections_frame(
            out[contract.SCORES],
            out[contract.BOXES],
            out[contract.MASKS_RLE],
            prepared.letterbox,
            query.dedup,
            prompt or "",
            kind,
            max_detections(self.manifest.num_queries, query.max_det),
        )
        frame.attrs["cache"] = status
        frame.attrs["mask_bytes"] = _answer_bytes(out[contract.MASKS_RLE])
        return frame

    @_on_the_served_model
    def multi(
        self,
        image: ImageLike | PreparedImage,
        keywords: Sequence[str] = (),
        score_thr: float | None = None,
        mask_thr: float | None = None,
        max_det: int | None = None,
        dedup: float | None = DEFAULT_DEDUP,
        bands: Sequence[int | str] | None = None,
        concepts: Sequence[Concept | tuple[str, Concept]] | Mapping[str, Concept] | None = None,
    ) -> pd.DataFrame:
        """Several keywords (and concepts) on ONE vision pass; a `keyword` column tells them apart.

        `concepts`: Concepts (their `keyword` is the concept's name, or `concept_<i>`), (name,
        Concept) pairs, or a {name: Concept} mapping; they share the vision pass with the keywords.
        At most the model's `max_keywords` in a call (:meth:`find` takes any number).
        """
        limits = {"score_thr": score_thr, "mask_thr": mask_thr, "max_det": max_det, "dedup": dedup}
        query = Query(keywords=keywords, concepts=concepts, **limits)
        keywords = list(query.keywords)
        named = query.named_concepts()
        for _, concept in named:
            self._check_concept(concept)
        limit = self.manifest.max_keywords
        if len(keywords) + len(named) > limit:
            raise InvalidInput(
                f"at most {limit} keywords and concepts per call, got {len(keywords) + len(named)}"
            )
        options = self._thresholds(score_thr, mask_thr, max_det)
        prepared = self._as_prepared(image, bands)
        texts = keywords + [contract.VISUAL_PROMPT] * len(named)
        inputs = {contract.IMAGES: prepared.images_u8, contract.TOKEN_IDS: tokenize(texts)}
        if named:
            checked = [c.inputs(self.manifest) for _, c in named]
            for name_ in contract.CONCEPT_OUTPUTS:
                inputs[name_] = np.concatenate([c[name_] for c in checked])
        inputs.update(options)
        queries = [(k, "text") for k in keywords] + [(n, "concept") for n, _ in named]
        out, status = self._features.ground(prepared, inputs)
        per_query = max_detections(self.manifest.num_queries, max_det)
        counts = np.asarray(out[contract.KEYWORD_COUNTS]).reshape(-1).astype(np.int64)
        if len(counts) != len(queries) or counts.min() < 0 or counts.max() > per_query:
            raise BadData(
                f"server answered keyword counts {counts.tolist()[:16]} for {len(queries)} "
                f"queries of at most {per_query} detections each: refused (wrong server answer)"
            )
        frames = []
        offsets = np.concatenate([[0], np.cumsum(counts)])
        masks = decode_answer(out[contract.MASKS_RLE], self.image_size, int(offsets[-1]))
        if len(masks) != offsets[-1]:
            raise BadData(
                f"server answered {len(masks)} masks for keyword counts {counts.tolist()}"
            )
        for i, (keyword, kind) in enumerate(queries):
            lo, hi = offsets[i], offsets[i + 1]
            frames.append(
                detections_frame(
                    out[contract.SCORES][lo:hi],
                    out[contract.BOXES][lo:hi],
                    masks.take(np.arange(lo, hi)),
                    prepared.letterbox,
                    dedup,
                    keyword,
                    kind,
                    per_query,
                )
            )
        frames = [f for f in frames if len(f)]
        frame = pd.concat(frames, ignore_index=True) if frames else empty_result()
        frame.attrs["cache"] = status
        frame.attrs["mask_bytes"] = _answer_bytes(masks)
        return frame

    # -- concepts ----------------------------------------------------------------------------
    @_on_the_served_model
    def encode_exemplars(
        self,
        image: ImageLike | PreparedImage,
        boxes=None,
        labels=None,
        name: str = "",
        bands: Sequence[int | str] | None = None,
        exemplars=None,
    ) -> Concept:
        """Box exemplars on this image -> a portable Concept to apply to other images.

        `exemplars`: boxes from vector data in any CRS, as for `segment`.
        """
        if exemplars is not None:
            boxes, labels = _vector_exemplars(image, exemplars, boxes, labels)
        boxes = None if boxes is None else validate.boxes(boxes, "exemplar boxes")
        if boxes is None or len(boxes) == 0:
            raise InvalidInput("encode_exemplars needs at least one box [x1, y1, x2, y2]")
        prepared = self._as_prepared(image, bands)
        inputs = self._exemplar_slots(prepared.letterbox, boxes, labels)
        out, _ = self._features.concept(prepared, inputs)
        return Concept(
            tensors_={name_: np.asarray(out[name_]) for name_ in contract.CONCEPT_OUTPUTS},
            model_id=self.model_id,
            name=name,
            boxes=boxes,
            labels=np.ones(len(boxes), np.int64) if labels is None else np.asarray(labels),
        )

    # -- interactive -------------------------------------------------------------------------
    @_on_the_served_model
    def interactive(self, image: ImageLike | PreparedImage, bands=None):
        """Encode the image once; then every click, box or painted mask refines a mask."""
        from napari_sam3.client.interactive import InteractiveSession

        self.manifest.require_interactive()  # before any work on the image
        prepared = self._as_prepared(image, bands)
        return InteractiveSession(self, prepared)

    # -- the feature cache -------------------------------------------------------------------
    def image(self, image: ImageLike | PreparedImage, bands=None) -> ImageHandle:
        """One image, prepared once, whose methods are the prompts (segment, multi, ...).

        Every prompt on an image reuses its vision features wherever the model runs; the
        handle also says whether they are held (`cached()`) and re-filters its last result.
        """
        return ImageHandle(self, self._as_prepared(image, bands))

    def cache_info(self) -> dict:
        """The feature cache's statistics: `features` (entries, bytes, max_bytes, hits, misses,
        computed, evictions, expired), `heads` (raw decoder outputs, same fields), `results`
        (answers re-filtered here), `image_bytes` (one image's features)."""
        return self._features.info()

    @contextlib.contextmanager
    def cache_limits(
        self,
        features_bytes: int | None = None,
        heads_bytes: int | None = None,
        results_bytes: int | None = None,
    ) -> Iterator[None]:
        """Within the block, bound this process's caches (bytes; None leaves one as it is), then
        restore them: `features_bytes` and `heads_bytes` for the embedded engine's feature and
        heads caches (at least one image's features: `cache_info()["image_bytes"]`; a server's
        caches are its own), `results_bytes` for the answers held here to re-filter (0: none).
        Scene runs use it so that tiles, seen once, fill no cache beyond their budget."""
        for name, value in (
            ("features_bytes", features_bytes),
            ("heads_bytes", heads_bytes),
            ("results_bytes", results_bytes),
        ):
            if value is not None:
                validate.integer(name, value, 0, 2**62)
        before = None
        if features_bytes is not None or heads_bytes is not None:
            before = self.engine.cache_bounds(features_bytes, heads_bytes)  # None: a server's
        results = None if results_bytes is None else self._features.bound_results(results_bytes)
        try:
            yield
        finally:
            if results is not None:
                self._features.bound_results(results)
            if before is not None:
                self.engine.cache_bounds(*before)

    def clear_cache(self) -> dict:
        """Drop every cached image and result (here and where the model runs)."""
        return self._features.clear()

    def is_cached(self, image: ImageLike | PreparedImage, bands=None) -> bool:
        """Whether the model holds this image's features now (a prompt would not encode it)."""
        return self._features.held(self._as_prepared(image, bands))


def run_query(
    client: Any, image: Any, query: Query, per_request: int | None = None
) -> pd.DataFrame:
    """A query on one image through a client's ``segment`` and ``multi`` (what
    :meth:`Sam3Client.find` and every scene tile run): one keyword, or exemplar boxes, is one
    grounding pass; otherwise the keywords and concepts share one vision pass, at most
    ``per_request`` (default the model's ``max_keywords``) in a request. ``df.attrs["requests"]``
    lists (queries, mask bytes) per request."""
    thresholds = query.thresholds()
    if query.exemplar_boxes or (len(query.keywords) == 1 and not query.concepts):
        frame = client.segment(
            image,
            query.keywords[0] if query.keywords else None,
            exemplar_boxes=np.asarray(query.exemplar_boxes) if query.exemplar_boxes else None,
            exemplar_labels=np.asarray(query.exemplar_labels) if query.exemplar_boxes else None,
            **thresholds,
        )
        frame.attrs["requests"] = [(1, frame.attrs.get("mask_bytes", 0))]
        return frame
    limit = client.manifest.max_keywords if per_request is None else per_request
    limit = validate.positive_int("per_request", limit)
    asked = [("text", t) for t in query.keywords] + [("concept", c) for c in query.named_concepts()]
    frames, requests = [], []
    for i in range(0, len(asked), limit):
        chunk = asked[i : i + limit]
        frame = client.multi(
            image,
            [q for kind, q in chunk if kind == "text"],
            concepts=[q for kind, q in chunk if kind == "concept"],
            **thresholds,
        )
        requests.append((len(chunk), frame.attrs.get("mask_bytes", 0)))
        frames.append(frame)
    attrs = {"cache": frames[-1].attrs.get("cache"), "requests": requests}
    kept = [f for f in frames if len(f)]
    frame = pd.concat(kept, ignore_index=True) if len(kept) > 1 else (kept or frames)[0]
    frame.attrs = {**attrs, "mask_bytes": sum(b for _, b in requests)}
    return frame


def _answer_bytes(masks) -> int:
    """What the runs of every mask the model answered take (8 bytes a run, made or not: how
    fragmented the masks are), before deduplication: the work a result took, from which scene
    runs plan their memory; 0 where only the payload's bytes are known."""
    masks = getattr(masks, "masks", masks)
    counts = getattr(masks, "counts", None)
    return 0 if counts is None else 8 * int(np.sum(counts))


def _vector_exemplars(image, exemplars, boxes, labels):
    """Vector exemplars on a georeferenced image -> pixel boxes (added to the given ones)."""
    from napari_sam3.prompts import vector as vector_prompts

    raster = vector_prompts.georeferenced(image)
    found = vector_prompts.exemplar_boxes(exemplars, raster)
    return vector_prompts.combine_boxes(boxes, labels, found)


def _plane_shape(image) -> tuple[int, int]:
    """(rows, cols) of an image array or Raster from its shape alone (a memmap is not read):
    the two largest of a 3-D shape (bands are few), or a 2-D shape."""
    shape = image.data.shape if isinstance(image, Raster) else np.shape(image)
    if len(shape) == 3:
        shape = sorted(shape)[1:]
    return (int(shape[0]), int(shape[-1])) if len(shape) >= 2 else (1, 1)
