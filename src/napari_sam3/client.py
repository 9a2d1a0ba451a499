"""`Sam3Client`: the notebook API, and what the napari widgets call underneath.

One client talks to one model repository, either on a Triton server (`Sam3Client("host:8001")`)
or in-process (`Sam3Client.local("model_repository/")`). Both run the same graphs, ensembles and
postprocess, so they return the same DataFrames.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from . import contract, validate
from .concept import Concept
from .engines.local import LocalEngine
from .letterbox import Letterbox
from .masks.rle import decode_masks
from .raster import Raster, read_raster
from .results import detections_frame, empty_result
from .stretch import to_model_rgb
from .tokenizer import tokenize

ImageLike = str | os.PathLike | np.ndarray | Raster


@dataclass
class PreparedImage:
    """An image as the model sees it, with the mapping back to its own pixels."""

    rgb: np.ndarray  # (rows, cols, 3) uint8, the stretched original
    letterbox: Letterbox
    images_u8: np.ndarray  # [1, 3, S, S]


class Sam3Client:
    def __init__(
        self,
        address: str,
        connect_timeout: float = 30.0,
        request_timeout: float = 300.0,
        retries: int = 3,
    ) -> None:
        from .engines.triton import TritonEngine

        self.engine = TritonEngine(address, connect_timeout, request_timeout, retries)
        self._load_manifest()

    @classmethod
    def local(cls, repository: str | os.PathLike, threads: int = 0) -> Sam3Client:
        """The embedded engine: the repository run in-process with ONNX Runtime (CPU, or CUDA)."""
        client = cls.__new__(cls)
        client.engine = LocalEngine(repository, threads=threads)
        client._load_manifest()
        return client

    def _load_manifest(self) -> None:
        self.manifest = contract.manifest_from_config(self.engine.config(contract.SEGMENT))
        self.image_size = self.manifest.image_size
        self.model_id = self.manifest.model_id

    @property
    def address(self) -> str:
        return self.engine.address

    def close(self) -> None:
        """Close the gRPC channels (Triton) or release the ONNX Runtime sessions (embedded)."""
        self.engine.close()

    def __enter__(self) -> Sam3Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        weights = "RANDOM WEIGHTS" if self.manifest.random_weights else "checkpoint"
        return (
            f"Sam3Client({self.address!r}, size={self.manifest.size}, "
            f"input={self.image_size}px, {weights}, model_id={self.model_id[:12]})"
        )

    # -- inputs ---------------------------------------------------------------------------
    def prepare(self, image: ImageLike, bands: Sequence[int | str] | None = None) -> PreparedImage:
        """Any raster path or array -> the letterboxed uint8 model input."""
        if isinstance(image, str | os.PathLike):
            image = read_raster(Path(image), bands=bands)
            bands = None
        if isinstance(image, Raster):
            rgb = to_model_rgb(image, bands=bands)
        elif isinstance(image, np.ndarray):
            rgb = to_model_rgb(image, bands=bands)
        else:
            raise TypeError(
                f"image must be a raster path, a numpy array or a Raster, got {type(image).__name__}"
            )
        letterbox = Letterbox(rgb.shape[:2], self.image_size)
        return PreparedImage(rgb, letterbox, letterbox.apply(rgb))

    def _as_prepared(self, image: ImageLike | PreparedImage, bands=None) -> PreparedImage:
        if isinstance(image, PreparedImage):
            if image.images_u8.shape[-1] != self.image_size:
                raise ValueError("this PreparedImage was made for another model size")
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
                raise ValueError("exemplar_labels given without exemplar_boxes")
            return slots
        boxes = validate.boxes(boxes, "exemplar boxes")
        if len(boxes) > k:
            raise ValueError(f"at most {k} exemplar boxes fit one request, got {len(boxes)}")
        if labels is None:
            labels = np.ones(len(boxes), np.int64)
        labels = np.asarray(labels)
        if labels.shape != (len(boxes),) or not np.isin(labels, (0, 1)).all():
            raise ValueError(
                f"exemplar_labels must be one 1 (positive) or 0 (negative) per box; "
                f"got {labels.tolist()} for {len(boxes)} boxes"
            )
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
    def segment(
        self,
        image: ImageLike | PreparedImage,
        prompt: str | None = None,
        exemplar_boxes=None,
        exemplar_labels=None,
        concept: Concept | None = None,
        score_thr: float | None = None,
        mask_thr: float | None = None,
        max_det: int | None = None,
        dedup: float | None = 0.85,
        bands: Sequence[int | str] | None = None,
    ) -> pd.DataFrame:
        """Everything `prompt` (and/or the exemplar boxes, or a concept) names in the image.

        Returns one row per object: `box` [x1, y1, x2, y2] in the image's pixels, `score`,
        `mask` (full-frame, dense on access), `keyword`, `prompt_kind`.
        """
        if prompt is not None and not isinstance(prompt, str):
            raise TypeError(f"prompt must be a string, got {type(prompt).__name__}")
        if prompt is not None and not prompt.strip():
            raise ValueError(
                "prompt is empty: give a word such as 'building', or use exemplar boxes"
            )
        if prompt is None and exemplar_boxes is None and concept is None:
            raise ValueError("nothing to look for: give a text prompt, exemplar boxes or a concept")
        if concept is not None and exemplar_boxes is not None:
            raise ValueError("give either a concept or exemplar boxes, not both")
        _check_dedup(dedup)
        options = self._thresholds(score_thr, mask_thr, max_det)
        prepared = self._as_prepared(image, bands)
        inputs = {
            contract.IMAGES: prepared.images_u8,
            contract.TOKEN_IDS: tokenize(prompt if prompt is not None else contract.VISUAL_PROMPT),
            **options,
        }
        if concept is not None:
            if not isinstance(concept, Concept):
                raise TypeError(f"concept must be a Concept, got {type(concept).__name__}")
            concept.check_model(self.model_id)
            inputs.update(concept.tensors())
            model, kind = contract.SEGMENT_CONCEPT, "concept"
        else:
            inputs.update(self._exemplar_slots(prepared.letterbox, exemplar_boxes, exemplar_labels))
            model = contract.SEGMENT
            kind = "text" if exemplar_boxes is None else "exemplar"
            if prompt is not None and exemplar_boxes is not None:
                kind = "text+exemplar"
        out = self.engine.infer(model, inputs, contract.RESULT_OUTPUTS)
        return detections_frame(
            out[contract.SCORES],
            out[contract.BOXES],
            out[contract.MASKS_RLE],
            prepared.letterbox,
            dedup,
            prompt or "",
            kind,
        )

    def multi(
        self,
        image: ImageLike | PreparedImage,
        keywords: Sequence[str] = (),
        score_thr: float | None = None,
        mask_thr: float | None = None,
        max_det: int | None = None,
        dedup: float | None = 0.85,
        bands: Sequence[int | str] | None = None,
        concepts: Sequence[Concept | tuple[str, Concept]] | Mapping[str, Concept] | None = None,
    ) -> pd.DataFrame:
        """Several keywords (and concepts) on ONE vision pass; a `keyword` column tells them apart.

        `concepts`: Concepts (their `keyword` is the concept's name, or `concept_<i>`), (name,
        Concept) pairs, or a {name: Concept} mapping; they share the vision pass with the keywords.
        """
        if isinstance(keywords, str):
            raise TypeError("keywords must be a list of strings, e.g. ['building', 'road']")
        keywords = list(keywords)
        named = _named_concepts(concepts, self.model_id)
        if not keywords and not named:
            raise ValueError("keywords is empty: give at least one, e.g. ['building']")
        bad = [k for k in keywords if not isinstance(k, str) or not k.strip()]
        if bad:
            raise ValueError(f"every keyword must be a non-empty string, got {bad!r}")
        limit = self.manifest.max_keywords
        if len(keywords) + len(named) > limit:
            raise ValueError(
                f"at most {limit} keywords and concepts per call, got {len(keywords) + len(named)}"
            )
        _check_dedup(dedup)
        options = self._thresholds(score_thr, mask_thr, max_det)
        prepared = self._as_prepared(image, bands)
        texts = keywords + [contract.VISUAL_PROMPT] * len(named)
        inputs = {contract.IMAGES: prepared.images_u8, contract.TOKEN_IDS: tokenize(texts)}
        if named:
            for name_ in contract.CONCEPT_OUTPUTS:
                inputs[name_] = np.concatenate([c.tensors()[name_] for _, c in named])
        inputs.update(options)
        queries = [(k, "text") for k in keywords] + [(n, "concept") for n, _ in named]
        out = self.engine.infer(contract.MULTI, inputs, contract.MULTI_OUTPUTS)
        counts = np.asarray(out[contract.KEYWORD_COUNTS]).reshape(-1)
        frames = []
        offsets = np.concatenate([[0], np.cumsum(counts)])
        masks = decode_masks(np.asarray(out[contract.MASKS_RLE], np.uint8).tobytes())
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
                )
            )
        frames = [f for f in frames if len(f)]
        if not frames:
            return empty_result()
        return pd.concat(frames, ignore_index=True)

    # -- concepts ----------------------------------------------------------------------------
    def encode_exemplars(
        self,
        image: ImageLike | PreparedImage,
        boxes,
        labels=None,
        name: str = "",
        bands: Sequence[int | str] | None = None,
    ) -> Concept:
        """Box exemplars on this image -> a portable Concept to apply to other images."""
        boxes = None if boxes is None else validate.boxes(boxes, "exemplar boxes")
        if boxes is None or len(boxes) == 0:
            raise ValueError("encode_exemplars needs at least one box [x1, y1, x2, y2]")
        prepared = self._as_prepared(image, bands)
        inputs = {contract.IMAGES: prepared.images_u8}
        inputs.update(self._exemplar_slots(prepared.letterbox, boxes, labels))
        out = self.engine.infer(contract.CONCEPT, inputs, contract.CONCEPT_OUTPUTS)
        return Concept(
            tensors_={name_: np.asarray(out[name_]) for name_ in contract.CONCEPT_OUTPUTS},
            model_id=self.model_id,
            name=name,
            boxes=boxes,
            labels=np.ones(len(boxes), np.int64) if labels is None else np.asarray(labels),
        )

    # -- interactive -------------------------------------------------------------------------
    def interactive(self, image: ImageLike | PreparedImage, bands=None):
        """Encode the image once; then every click, box or painted mask refines a mask."""
        from .interactive import InteractiveSession

        prepared = self._as_prepared(image, bands)
        return InteractiveSession(self, prepared, image_id=uuid.uuid4().hex)


def _named_concepts(concepts, model_id: str) -> list[tuple[str, Concept]]:
    if concepts is None:
        return []
    if isinstance(concepts, Concept):
        concepts = [concepts]
    if isinstance(concepts, Mapping):
        items = list(concepts.items())
    else:
        items = [
            c if isinstance(c, tuple) else (getattr(c, "name", "") or f"concept_{i}", c)
            for i, c in enumerate(concepts)
        ]
    for _, concept in items:
        if not isinstance(concept, Concept):
            raise TypeError(f"concepts must be Concept objects, got {type(concept).__name__}")
        concept.check_model(model_id)
    return items


def _check_dedup(dedup) -> None:
    if dedup is not None:
        validate.unit_interval("dedup", dedup, open_low=True, hint="(or None to keep every mask)")
