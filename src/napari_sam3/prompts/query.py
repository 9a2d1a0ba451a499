"""What to look for and how to decide: one frozen value that every front end builds.

A :class:`Query` holds the keywords, the concepts, the exemplars (a vector layer, or boxes in
one image's pixels), the thresholds, the deduplication and the vector post-processing. It is
checked once, when it is made, with the one set of messages; it pickles (a batch sends it to
every worker) and has a content ``key`` (a concept counts by its tensors, not its name), which
the batch journal compares. The CLI, the napari panel, the QGIS worker and notebooks build it;
``Sam3Client.segment`` and ``segment_scene`` take it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from napari_sam3.core import validate
from napari_sam3.core.errors import InvalidInput, InvalidType
from napari_sam3.prompts.concept import Concept
from napari_sam3.prompts.keywords import check_keyword, parse_keywords

__all__ = ["DEFAULT_DEDUP", "PostProcess", "Query"]

DEFAULT_DEDUP = 0.85
_NOTHING = "nothing to look for: give keywords (e.g. 'building'), exemplars or a concept"


@dataclass(frozen=True)
class PostProcess:
    """What to do to the polygons of a result (:func:`napari_sam3.gis.post.postprocess` does
    it); the defaults do nothing."""

    min_area_m2: float | None = None
    min_area_px: int | None = None
    fill_holes: bool = False
    regularize: bool = False
    smooth: bool = False
    simplify: float = 0.0  # CRS units

    def __post_init__(self) -> None:
        for name in ("min_area_m2", "min_area_px", "simplify"):
            value = getattr(self, name)
            if value is not None and (not np.isfinite(value) or value < 0):
                raise InvalidInput(f"{name} must be a number >= 0, got {value!r}")

    @property
    def steps(self) -> list[str]:
        out = []
        if self.min_area_m2:
            out.append(f"min_area_m2={self.min_area_m2:g}")
        if self.min_area_px:
            out.append(f"min_area_px={self.min_area_px}")
        if self.fill_holes:
            out.append("fill_holes")
        if self.regularize:
            out.append("regularize")
        if self.smooth:
            out.append("smooth")
        if self.simplify:
            out.append(f"simplify={self.simplify:g}")
        return out


@dataclass(frozen=True, eq=False)
class Query:
    """What to look for in an image or scene, and how to decide what is kept.

    Args:
        keywords: words to look for (a list; ``Query.parse("building, road")`` splits text).
            Duplicates are dropped; all keywords share one vision pass.
        concepts: :class:`~napari_sam3.prompts.concept.Concept` objects, concept ``.npz`` files,
            ``(name, Concept)`` pairs or a ``{name: Concept}`` mapping; each runs as a keyword
            named after the concept (its name, else its file's stem, else ``concept_<i>``).
        exemplars: a vector layer of exemplar boxes in any CRS (a file, a GeoDataFrame or a
            :class:`~napari_sam3.prompts.vector.VectorPrompt`): encoded on the image, or on
            each scene tile they fall in, before the run.
        exemplar_boxes, exemplar_labels: exemplar boxes ``[x1, y1, x2, y2]`` in ONE image's pixels (1
            positive, 0 negative; default all positive), with at most one keyword and no
            concept (the model takes them in one grounding pass).
        score_thr, mask_thr, max_det: the model's thresholds (None: the repository's).
        dedup: overlap above which the lower-scoring of two masks of a keyword is dropped
            (None keeps them all).
        postprocess: a :class:`PostProcess` for the polygons written (None: none).
    """

    keywords: tuple[str, ...] = ()
    concepts: tuple[Concept, ...] = ()
    exemplars: Any = None
    exemplar_boxes: tuple[tuple[float, float, float, float], ...] = ()
    exemplar_labels: tuple[int, ...] = ()
    score_thr: float | None = None
    mask_thr: float | None = None
    max_det: int | None = None
    dedup: float | None = DEFAULT_DEDUP
    postprocess: PostProcess | None = None
    concept_files: tuple[str, ...] = ()  # the files concepts were read from (set on reading)

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "keywords", _keywords(self.keywords))
        concepts, files = _concepts(self.concepts)
        put(self, "concepts", concepts)
        put(self, "concept_files", tuple(dict.fromkeys((*self.concept_files, *files))))
        put(self, "exemplars", _exemplars(self.exemplars))
        boxes, labels = _boxes(self.exemplar_boxes, self.exemplar_labels)
        put(self, "exemplar_boxes", boxes)
        put(self, "exemplar_labels", labels)
        if not (
            self.keywords or self.concepts or self.exemplars is not None or self.exemplar_boxes
        ):
            raise InvalidInput(_NOTHING)
        if self.exemplar_boxes and not self.keywords and 1 not in self.exemplar_labels:
            raise InvalidInput(
                "a visual query needs at least one positive exemplar box (label 1), or a keyword "
                "that the negative boxes refine"
            )
        if self.exemplar_boxes and self.concepts:
            raise InvalidInput("give either a concept or exemplar boxes, not both")
        if self.exemplar_boxes and (len(self.keywords) > 1 or self.exemplars is not None):
            raise InvalidInput(
                "exemplar boxes go with at most one keyword and no exemplar layer (the model "
                "takes them in one grounding pass); run the other keywords as a second query"
            )
        if self.score_thr is not None:
            put(self, "score_thr", validate.unit_interval("score_thr", self.score_thr))
        if self.mask_thr is not None:
            mask_thr = validate.unit_interval(
                "mask_thr", self.mask_thr, open_low=True, open_high=True
            )
            put(self, "mask_thr", mask_thr)
        if self.max_det is not None:
            put(self, "max_det", validate.positive_int("max_det", self.max_det, validate.INT32_MAX))
        if self.dedup is not None:
            dedup = validate.unit_interval(
                "dedup", self.dedup, open_low=True, hint="(or None to keep every mask)"
            )
            put(self, "dedup", dedup)
        if self.postprocess is not None and not isinstance(self.postprocess, PostProcess):
            raise InvalidInput(
                f"postprocess must be a PostProcess, got {type(self.postprocess).__name__}"
            )

    # -- making one -----------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | None, **fields: Any) -> Query:
        """Keywords from text as an analyst types them (``"building, road; pool"``)."""
        return cls(keywords=tuple(parse_keywords(text)), **fields)

    @classmethod
    def of(
        cls,
        prompt: str | None = None,
        keywords: Sequence[str] | None = None,
        concept: Any = None,
        **fields: Any,
    ) -> Query:
        """The keyword arguments the library took before queries existed (``prompt``, a word;
        ``keywords``, a list; ``concept``, one or a list) as a query."""
        words: list[str] = []
        if prompt is not None:
            if not isinstance(prompt, str):
                raise InvalidType(
                    f"prompt must be a string such as 'building', got {type(prompt).__name__}"
                )
            words.append(prompt)
        if keywords is not None:
            if isinstance(keywords, str):
                raise _WrongType(_KEYWORDS_TYPE)
            words += list(keywords)
        concepts = () if concept is None else concept
        if isinstance(concepts, Concept | str | os.PathLike):
            concepts = (concepts,)
        return cls(keywords=tuple(words), concepts=concepts, **fields)

    def replace(self, **changes: Any) -> Query:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    # -- reading one ----------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Keywords and concepts: the queries of one vision pass."""
        return len(self.keywords) + len(self.concepts)

    def named_concepts(self) -> list[tuple[str, Concept]]:
        """(keyword, concept) of every concept: its name, else ``concept_<i>``."""
        return [(c.name or f"concept_{i}", c) for i, c in enumerate(self.concepts)]

    def thresholds(self) -> dict[str, Any]:
        """score_thr, mask_thr, max_det and dedup, as the client's keywords."""
        return {
            "score_thr": self.score_thr,
            "mask_thr": self.mask_thr,
            "max_det": self.max_det,
            "dedup": self.dedup,
        }

    def check_model(self, model_id: str) -> None:
        """Refuses concepts made by another model than ``model_id``."""
        for concept in self.concepts:
            concept.check_model(model_id)

    def files(self) -> dict[str, list[str]]:
        """The files the query reads (exemplar layer, concept files): no output may replace them."""
        source = getattr(self.exemplars, "source", None)
        return {
            "exemplar file": [os.fspath(source)] if isinstance(source, str | os.PathLike) else [],
            "concept": list(self.concept_files),
        }

    def key(self) -> str:
        """What identifies the query's results: equal keys, equal detections on equal inputs."""
        return hashlib.sha256(json.dumps(self._identity(), sort_keys=True).encode()).hexdigest()

    def _identity(self) -> dict[str, Any]:
        exemplars = None
        if self.exemplars is not None:
            source = self.exemplars.source
            exemplars = {
                "source": os.fspath(source)
                if isinstance(source, str | os.PathLike)
                else _frame_digest(source),
                "label_column": self.exemplars.label_column,
                "crs": None if self.exemplars.crs is None else str(self.exemplars.crs),
            }
        return {
            "keywords": list(self.keywords),
            "concepts": [
                [name, hashlib.sha256(c.to_bytes()).hexdigest()]
                for name, c in self.named_concepts()
            ],
            "exemplars": exemplars,
            "boxes": [list(b) for b in self.exemplar_boxes],
            "exemplar_labels": list(self.exemplar_labels),
            **self.thresholds(),
            "postprocess": None if self.postprocess is None else self.postprocess.steps,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Query) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        parts = [f"keywords={list(self.keywords)!r}"] if self.keywords else []
        if self.concepts:
            parts.append(f"concepts={[n for n, _ in self.named_concepts()]!r}")
        if self.exemplars is not None:
            parts.append("exemplars=<layer>")
        if self.exemplar_boxes:
            parts.append(f"boxes={len(self.exemplar_boxes)}")
        parts += [f"{k}={v!r}" for k, v in self.thresholds().items() if v is not None]
        if self.postprocess is not None:
            parts.append(f"postprocess={self.postprocess.steps!r}")
        return f"Query({', '.join(parts)})"


_KEYWORDS_TYPE = "keywords must be a list of strings, e.g. ['building', 'road']"


class _WrongType(InvalidInput, InvalidType):
    """A value of the wrong kind (a single string where a list of keywords belongs)."""


def _keywords(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        raise _WrongType(_KEYWORDS_TYPE)
    out: list[str] = []
    for word in value:
        word = check_keyword(word)
        if word not in out:
            out.append(word)
    return tuple(out)


def _concepts(value: Any) -> tuple[tuple[Concept, ...], list[str]]:
    """The concepts, and the files among them (read here)."""
    if value is None:
        return (), []
    if isinstance(value, Concept | str | os.PathLike):
        value = [value]
    items = list(value.items()) if isinstance(value, Mapping) else list(value)
    out, files = [], []
    for item in items:
        name = None
        if isinstance(item, tuple) and len(item) == 2:
            name, item = item
        if isinstance(item, str | os.PathLike):
            files.append(os.fspath(item))
            item = Concept.load_named(item)
        elif not isinstance(item, Concept):
            raise _WrongType(
                f"a concept is a Concept or a concept .npz file, got {type(item).__name__}"
            )
        if name is not None and name != item.name:
            item = dataclasses.replace(item, name=str(name))
        if item.name:  # it names the concept's detections, as a keyword does
            item = dataclasses.replace(item, name=check_keyword(item.name))
        out.append(item)
    return tuple(out), files


def _exemplars(value: Any) -> Any:
    if value is None:
        return None
    from napari_sam3.prompts.vector import VectorPrompt

    return value if isinstance(value, VectorPrompt) else VectorPrompt(value)


def _boxes(boxes: Any, labels: Any) -> tuple[tuple, tuple]:
    if boxes is None or (not isinstance(boxes, np.ndarray) and len(boxes) == 0):
        if labels is not None and len(labels):
            raise InvalidInput("exemplar_labels given without exemplar_boxes")
        return (), ()
    arr = validate.boxes(boxes, "exemplar boxes")
    if labels is None or len(labels) == 0:
        labels = np.ones(len(arr), np.int64)
    labels = validate.exemplar_labels(labels, len(arr))
    return tuple(tuple(float(v) for v in b) for b in arr), tuple(int(v) for v in labels)


def _frame_digest(frame: Any) -> str:
    """A GeoDataFrame given as exemplars: its geometries and columns, by content."""
    data = frame.to_wkb() if hasattr(frame, "to_wkb") else frame
    return hashlib.sha256(repr(data.to_dict("list")).encode()).hexdigest()
