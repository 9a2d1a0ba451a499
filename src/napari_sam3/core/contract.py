"""The model repository's interface: the one source of truth for names, dtypes and shapes.

`sam3-export` writes graphs and a manifest that follow this module; the client, the embedded
engine and the Triton config writer read it. Pure Python (no numpy): every shape is a function
of the sizes recorded in the repository's manifest (`sam3_manifest.json`).

Conventions (docs/model_repository.md has the full description):

- `images_u8` is uint8 [1,3,S,S], letterboxed RGB; normalisation happens inside the encoder.
- Exemplar boxes are [x1, y1, x2, y2] in model-input pixels (0..S), in K fixed slots with labels
  (1 positive, 0 negative) and a validity mask. No valid slot = a text-only prompt.
- Decoder boxes (`pred_boxes`) are [x1, y1, x2, y2] normalised to [0, 1] of the model input;
  multiply by S for model-input pixels. Scores are sigmoid(pred_logits) * sigmoid(presence_logit).
- Padding masks are True where a token is padding (ignored), as in PyTorch attention.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__:  # inside napari_sam3
    from napari_sam3.core.errors import BadData, InvalidInput, MissingFile, UnknownKey
else:  # the copy beside a Triton Python model (sam3-export copies errors.py)
    from errors import BadData, InvalidInput, MissingFile, UnknownKey

MANIFEST_FILE = "sam3_manifest.json"
# 2: the interactive levels channels-last and the first layer's image projections (pvs_first_*)
MANIFEST_VERSION = 2
# Manifest field: False when the checkpoint had no interactive (tracker.*) weights.
INTERACTIVE_HEAD = "interactive_head"
# Triton config parameter that carries the manifest (JSON) on the ensembles.
MANIFEST_PARAMETER = "sam3_manifest"

PATCH_SIZE = 14
TEXT_TOKENS = 32
EXEMPLAR_SLOTS = 8
MAX_KEYWORDS = 8
# The official "no text" query: exemplar-only prompts run with this text (as SAM3's processor).
VISUAL_PROMPT = "visual"
SOT_TOKEN, EOT_TOKEN, PAD_TOKEN = 49406, 49407, 0

# -- model names: ONNX graphs (`<name>/1/model.onnx`) --------------------------------------
ENCODER = "sam3_unified_encoder"
TEXT = "sam3_text"
DECODER = "sam3_decoder"
CONCEPT_ENCODER = "sam3_concept_encoder"
DECODER_CT = "sam3_decoder_ct"
PVS_DECODER = "sam3_pvs_decoder"
PVS_GRID_DECODER = "sam3_pvs_decoder_grid"
GROUNDING_GRAPHS = (ENCODER, TEXT, DECODER, CONCEPT_ENCODER, DECODER_CT)
PVS_GRAPHS = (PVS_DECODER, PVS_GRID_DECODER)

# -- model names: postprocess and ensembles (written by sam3_export.triton_repo) ------------
POSTPROCESS = "sam3_postprocess"
SEGMENT = "sam3_segment"
SEGMENT_CONCEPT = "sam3_segment_concept"
CONCEPT = "sam3_concept"
MULTI = "sam3_multi"
# The one model in front of the heads that holds every image's vision features (and recent raw
# decoder outputs); its logic is napari_sam3.runtime.cached.
CACHED = "sam3_cached"

# -- tensor names ---------------------------------------------------------------------------
IMAGES = "images_u8"
TOKEN_IDS = "token_ids"
DET_FPN = ("det_fpn_0", "det_fpn_1", "det_fpn_2")  # grounding neck, strides 3.5, 7, 14
DET_POS = "det_pos_2"  # sine position encoding of det_fpn_2
# Interactive (PVS) neck, same strides, channels-last [1, h, w, C]. As the official
# `Sam3Processor.set_image` leaves them: levels 0 and 1 already through the mask decoder's
# conv_s0 / conv_s1 (d_model/8, d_model/4 channels), level 2 as the neck made it (d_model
# channels, no `no_mem_embed` added).
PVS_FPN = ("pvs_fpn_0", "pvs_fpn_1", "pvs_fpn_2")
# The mask decoder's first two-way layer, its projections of the image (no prompt changes them;
# a mask input's share is added by the decoder), [1, heads, d_model/2/heads, hw] (each head's
# channels first: the layout the decoder's attention products read without a transpose): the
# token-to-image keys and values and the image-to-token queries (sam3_export.graphs.pvs_decoder).
PVS_FIRST_LAYER = ("pvs_first_keys", "pvs_first_values", "pvs_first_queries")
PVS_HEADS = 8  # SAM's two-way transformer; its attention works in d_model / 2 channels
PVS_FEATURES = (*PVS_FPN, *PVS_FIRST_LAYER)
VISION_TENSORS = (*DET_FPN, DET_POS, *PVS_FEATURES)
GROUNDING_VISION = (*DET_FPN, DET_POS)
TEXT_FEATURES = "text_features"
TEXT_PADDING_MASK = "text_padding_mask"
EXEMPLAR_BOXES = "exemplar_boxes"
EXEMPLAR_LABELS = "exemplar_labels"
EXEMPLAR_VALID = "exemplar_valid"
CONCEPT_TOKENS_NAME = "concept_tokens"
CONCEPT_PADDING_MASK = "concept_padding_mask"
CONCEPT_OUTPUTS = (CONCEPT_TOKENS_NAME, CONCEPT_PADDING_MASK)
PRED_LOGITS = "pred_logits"
PRED_BOXES = "pred_boxes"
PRED_MASKS = "pred_masks"
PRESENCE_LOGIT = "presence_logit"
DECODER_OUTPUTS = (PRED_LOGITS, PRED_BOXES, PRED_MASKS, PRESENCE_LOGIT)

# postprocess / ensemble request options and results
SCORE_THR = "score_thr"
MASK_THR = "mask_thr"
MAX_DET = "max_det"
SCORES = "scores"
BOXES = "boxes"
MASKS_RLE = "masks_rle"
KEYWORD_COUNTS = "keyword_counts"
RESULT_OUTPUTS = (SCORES, BOXES, MASKS_RLE)
MULTI_OUTPUTS = (*RESULT_OUTPUTS, KEYWORD_COUNTS)

# -- interactive (PVS) decoder and the interactive ops of `sam3_cached`. The graphs come from
# sam3_export.graphs.pvs_decoder (its module docstring describes the prompt semantics).
PVS_POINTS = 16  # point slots per prompt (the official tracker caps prompts at 16 points)
PVS_GRID_BATCH = 4  # prompts per grid call (full size, 1 thread: 75 CPU-ms/prompt at 4, 88 at 16)
PVS_GRID_POINTS = 1  # point slots per grid prompt: one click each
IMAGE_ID = "image_id"
PVS_POINT_COORDS = "point_coords"  # float32 [B, P, 2], x, y in model-input pixels
PVS_POINT_LABELS = "point_labels"  # float32 [B, P]: 1 positive, 0 negative, -1 empty slot
PVS_BOX = "box"  # float32 [1, 4] x1, y1, x2, y2 in model-input pixels
PVS_HAS_BOX = "has_box"  # bool [1]
PVS_MASK_INPUT = "mask_input"  # float32 [1, 1, 4f, 4f] low-res logits of a previous mask
PVS_HAS_MASK = "has_mask"  # bool [1]
PVS_PROMPTS = (
    PVS_POINT_COORDS,
    PVS_POINT_LABELS,
    PVS_BOX,
    PVS_HAS_BOX,
    PVS_MASK_INPUT,
    PVS_HAS_MASK,
)
PVS_DECODER_MASKS = "pvs_masks"  # float32 [B, 3, 4f, 4f] low-res mask logits (multimask)
PVS_DECODER_IOU = "pvs_iou"  # float32 [B, 3]
PVS_DECODER_OUTPUTS = (PVS_DECODER_MASKS, PVS_DECODER_IOU)
PVS_IOU = "iou"
PVS_LOW_RES = "low_res_masks"
PVS_GRID_COORDS = "grid_coords"
PVS_GRID_LABELS = "grid_labels"
PVS_GRID_LOW_RES = "grid_low_res_masks"
PVS_GRID_IOU = "grid_iou"
INTERACTIVE_OUTPUTS = (PVS_IOU, PVS_LOW_RES, MASKS_RLE)

# -- the `sam3_cached` model: requests name an op and carry the image's content key
CACHE_OP = "cache_op"  # string [1]: ground, concept, interactive, encode, info, clear
CACHE_STATUS = "cache_status"  # string [1]: hit, encoded, or miss (send images_u8 again)
CACHE_INFO = "cache_info"  # string [1]: JSON statistics
CACHE_MODEL_ID = "cache_model_id"  # string [1]: the model_id of the model that answered
ENCODED_CONCEPT = ("encoded_concept_tokens", "encoded_concept_padding_mask")


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a graph or a Triton model.

    `dtype` in numpy spelling ("float32", "object" for Triton strings); `shape` with -1 where
    any size fits (Triton models; the graphs are static); `optional` as in a Triton config.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    optional: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    def describe(self) -> str:
        dims = ",".join("?" if d < 0 else str(d) for d in self.shape)
        return f"{self.name} {self.dtype}[{dims}]"

    def check(self, value: Any) -> None:
        """Raise ValueError, as Triton would, when the array `value` does not fit."""
        if self.dtype == "object":
            ok_dtype = value.dtype.kind in "OSU"
        else:
            ok_dtype = value.dtype.name == self.dtype
        if not ok_dtype:
            raise InvalidInput(f"input {self.describe()} got dtype {value.dtype}")
        if len(value.shape) != len(self.shape) or any(
            d >= 0 and d != s for d, s in zip(self.shape, value.shape, strict=True)
        ):
            raise InvalidInput(f"input {self.describe()} got shape {list(value.shape)}")


@dataclass(frozen=True)
class GraphIO:
    """A graph's inputs and outputs, in order."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec:
        return _find(self.inputs, name, self.name)

    def output(self, name: str) -> TensorSpec:
        return _find(self.outputs, name, self.name)

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]


def _find(specs: tuple[TensorSpec, ...], name: str, graph: str) -> TensorSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    raise UnknownKey(f"{graph} has no tensor {name!r}")


@dataclass(frozen=True)
class Sizes:
    """The sizes every shape derives from (all recorded in the manifest)."""

    image_size: int
    d_model: int
    num_queries: int
    text_tokens: int = TEXT_TOKENS
    exemplar_slots: int = EXEMPLAR_SLOTS
    patch_size: int = PATCH_SIZE

    @property
    def feature_size(self) -> int:
        return self.image_size // self.patch_size

    @property
    def fpn_sizes(self) -> tuple[int, int, int]:
        f = self.feature_size
        return (4 * f, 2 * f, f)

    @property
    def mask_size(self) -> int:
        return 4 * self.feature_size

    @property
    def concept_tokens(self) -> int:
        """One per exemplar slot plus the geometry encoder's CLS token."""
        return self.exemplar_slots + 1

    def __post_init__(self) -> None:
        if self.image_size % self.patch_size:
            raise InvalidInput(
                f"image_size {self.image_size} is not a multiple of patch_size {self.patch_size}"
            )


def vision_specs(sizes: Sizes) -> tuple[TensorSpec, ...]:
    """The unified encoder's outputs: grounding levels + position encoding, then PVS levels."""
    d, fpn = sizes.d_model, sizes.fpn_sizes
    det = tuple(TensorSpec(n, "float32", (1, d, s, s)) for n, s in zip(DET_FPN, fpn, strict=True))
    pos = TensorSpec(DET_POS, "float32", (1, d, fpn[2], fpn[2]))
    pvs_channels = (d // 8, d // 4, d)
    pvs = tuple(
        TensorSpec(n, "float32", (1, s, s, c))
        for n, c, s in zip(PVS_FPN, pvs_channels, fpn, strict=True)
    )
    first_shape = (1, PVS_HEADS, d // 2 // PVS_HEADS, fpn[2] * fpn[2])
    first = tuple(TensorSpec(n, "float32", first_shape) for n in PVS_FIRST_LAYER)
    return (*det, pos, *pvs, *first)


def _by_name(specs: tuple[TensorSpec, ...], names: tuple[str, ...]) -> tuple[TensorSpec, ...]:
    table = {s.name: s for s in specs}
    return tuple(table[n] for n in names)


def text_specs(sizes: Sizes) -> tuple[TensorSpec, ...]:
    t = sizes.text_tokens
    return (
        TensorSpec(TEXT_FEATURES, "float32", (1, t, sizes.d_model)),
        TensorSpec(TEXT_PADDING_MASK, "bool", (1, t)),
    )


def exemplar_specs(sizes: Sizes) -> tuple[TensorSpec, ...]:
    k = sizes.exemplar_slots
    return (
        TensorSpec(EXEMPLAR_BOXES, "float32", (1, k, 4)),
        TensorSpec(EXEMPLAR_LABELS, "int64", (1, k)),
        TensorSpec(EXEMPLAR_VALID, "bool", (1, k)),
    )


def concept_specs(sizes: Sizes) -> tuple[TensorSpec, ...]:
    c = sizes.concept_tokens
    return (
        TensorSpec(CONCEPT_TOKENS_NAME, "float32", (1, c, sizes.d_model)),
        TensorSpec(CONCEPT_PADDING_MASK, "bool", (1, c)),
    )


def decoder_output_specs(sizes: Sizes) -> tuple[TensorSpec, ...]:
    q, m = sizes.num_queries, sizes.mask_size
    return (
        TensorSpec(PRED_LOGITS, "float32", (1, q)),
        TensorSpec(PRED_BOXES, "float32", (1, q, 4)),
        TensorSpec(PRED_MASKS, "float32", (1, q, m, m)),
        TensorSpec(PRESENCE_LOGIT, "float32", (1, 1)),
    )


def graph_io(name: str, sizes: Sizes) -> GraphIO:
    """Inputs and outputs of one graph (`Manifest.graph_io` uses the repository's sizes).

    The PVS graphs use the default slot counts here; `pvs_graph_io` takes others.
    """
    s = sizes.image_size
    vision = vision_specs(sizes)
    grounding = _by_name(vision, GROUNDING_VISION)
    if name == ENCODER:
        return GraphIO(name, (TensorSpec(IMAGES, "uint8", (1, 3, s, s)),), vision)
    if name == TEXT:
        tokens = TensorSpec(TOKEN_IDS, "int64", (1, sizes.text_tokens))
        return GraphIO(name, (tokens,), text_specs(sizes))
    if name == DECODER:
        inputs = (*grounding, *text_specs(sizes), *exemplar_specs(sizes))
        return GraphIO(name, inputs, decoder_output_specs(sizes))
    if name == CONCEPT_ENCODER:
        inputs = (*_by_name(vision, (DET_FPN[2], DET_POS)), *exemplar_specs(sizes))
        return GraphIO(name, inputs, concept_specs(sizes))
    if name == DECODER_CT:
        inputs = (*grounding, *text_specs(sizes), *concept_specs(sizes))
        return GraphIO(name, inputs, decoder_output_specs(sizes))
    if name in PVS_GRAPHS:
        return pvs_graph_io(name, sizes)
    raise UnknownKey(f"unknown graph {name!r}; known: {GROUNDING_GRAPHS + PVS_GRAPHS}")


def pvs_graph_io(
    name: str,
    sizes: Sizes,
    points: int = PVS_POINTS,
    grid_batch: int = PVS_GRID_BATCH,
    grid_points: int = PVS_GRID_POINTS,
) -> GraphIO:
    """Inputs and outputs of `sam3_pvs_decoder` (batch 1) or `sam3_pvs_decoder_grid`."""
    m = sizes.mask_size
    features = _by_name(vision_specs(sizes), PVS_FEATURES)
    if name == PVS_GRID_DECODER:
        b = grid_batch
        inputs = (
            *features,
            TensorSpec(PVS_POINT_COORDS, "float32", (b, grid_points, 2)),
            TensorSpec(PVS_POINT_LABELS, "float32", (b, grid_points)),
        )
        outputs = (
            TensorSpec(PVS_DECODER_MASKS, "float32", (b, 3, m, m)),
            TensorSpec(PVS_DECODER_IOU, "float32", (b, 3)),
        )
        return GraphIO(name, inputs, outputs)
    if name == PVS_DECODER:
        inputs = (
            *features,
            TensorSpec(PVS_POINT_COORDS, "float32", (1, points, 2)),
            TensorSpec(PVS_POINT_LABELS, "float32", (1, points)),
            TensorSpec(PVS_BOX, "float32", (1, 4)),
            TensorSpec(PVS_HAS_BOX, "bool", (1,)),
            TensorSpec(PVS_MASK_INPUT, "float32", (1, 1, m, m)),
            TensorSpec(PVS_HAS_MASK, "bool", (1,)),
        )
        outputs = (
            TensorSpec(PVS_DECODER_MASKS, "float32", (1, 3, m, m)),
            TensorSpec(PVS_DECODER_IOU, "float32", (1, 3)),
        )
        return GraphIO(name, inputs, outputs)
    raise UnknownKey(f"unknown PVS graph {name!r}")


def graph_path(repository: str | os.PathLike, name: str, version: int = 1) -> Path:
    """Where a graph lives in the model repository."""
    return Path(repository) / name / str(version) / "model.onnx"


# -- the manifest ---------------------------------------------------------------------------
def _field(data: Mapping[str, Any], key: str, kind: type, source: str, optional: bool = False):
    if key not in data or (optional and data[key] is None):
        if optional:
            return None
        raise BadData(f"{source}: manifest lacks the field {key!r}; re-export the repository")
    value = data[key]
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok or (kind is int and value < 0):
        raise BadData(
            f"{source}: manifest field {key!r} must be a "
            f"{'non-negative integer' if kind is int else kind.__name__}, got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Manifest:
    """`sam3_manifest.json` read once and checked: what the client knows about a repository.

    The constructors (`from_dict`, `load_manifest`, `manifest_from_config`) validate every
    field; a bad manifest is a ValueError naming its source and the field. `as_dict()` is the
    JSON as written (entries without a field here, e.g. `versions`, are kept there).
    """

    sizes: Sizes
    size: str
    model_id: str
    random_weights: bool
    seed: int | None
    checkpoint: str | None
    max_keywords: int
    # The interactive graphs' slot counts (None: exported without them).
    pvs_points: int | None
    pvs_grid_batch: int | None
    pvs_grid_points: int | None
    pvs_mask_input_size: int | None
    # Written by `sam3_export.triton_repo.write_repository` (None in the bare export's file).
    flavor: str | None
    device: str | None
    files: Mapping[str, Any]
    source: str = field(default="manifest", compare=False)
    data: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def image_size(self) -> int:
        return self.sizes.image_size

    @property
    def exemplar_slots(self) -> int:
        return self.sizes.exemplar_slots

    @property
    def num_queries(self) -> int:
        return self.sizes.num_queries

    @property
    def mask_size(self) -> int:
        return self.sizes.mask_size

    @property
    def interactive_head(self) -> bool:
        """Whether the repository has the interactive (point/box click) head."""
        return self.data.get(INTERACTIVE_HEAD, True) is not False and self.pvs_points is not None

    def require_interactive(self) -> None:
        """Raise the one message for an interactive call on a repository without the head."""
        if self.data.get(INTERACTIVE_HEAD, True) is False:
            raise InvalidInput(
                f"this repository has no interactive head: its checkpoint "
                f"({self.checkpoint or 'unnamed'}) had no tracker.* weights, so only text and "
                "exemplar (grounding) prompts work; export a checkpoint with tracker.* weights "
                "(Meta's release sam3.pt) for clicks and automatic masks"
            )
        if self.pvs_points is None:
            raise InvalidInput(
                "this repository was exported without the interactive graphs; export it again "
                "with this napari-sam3's sam3-export"
            )

    def graph_io(self, name: str) -> GraphIO:
        """The tensor specs of one graph of this repository."""
        if name in PVS_GRAPHS and self.pvs_points is not None:
            return pvs_graph_io(
                name, self.sizes, self.pvs_points, self.pvs_grid_batch, self.pvs_grid_points
            )
        return graph_io(name, self.sizes)

    def as_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.data))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "manifest") -> Manifest:
        if not isinstance(data, Mapping):
            raise BadData(f"{source}: a manifest must be a JSON object")
        version = _field(data, "manifest_version", int, source)
        if version != MANIFEST_VERSION:
            raise BadData(
                f"{source}: manifest_version {version} is not supported "
                f"(this napari-sam3 reads version {MANIFEST_VERSION}); re-export the repository"
            )
        try:
            sizes = Sizes(
                image_size=_field(data, "image_size", int, source),
                d_model=_field(data, "d_model", int, source),
                num_queries=_field(data, "num_queries", int, source),
                text_tokens=_field(data, "text_tokens", int, source),
                exemplar_slots=_field(data, "exemplar_slots", int, source),
                patch_size=_field(data, "patch_size", int, source),
            )
        except (ValueError, ZeroDivisionError) as exc:
            raise InvalidInput(f"{source}: {exc}") from None
        mask_size = _field(data, "mask_size", int, source)
        if mask_size != sizes.mask_size:
            raise BadData(
                f"{source}: manifest field 'mask_size' {mask_size} != 4 * image_size / "
                f"patch_size = {sizes.mask_size}"
            )
        pvs_mask = _field(data, "pvs_mask_input_size", int, source, optional=True)
        if pvs_mask is not None and pvs_mask != sizes.mask_size:
            raise BadData(
                f"{source}: manifest field 'pvs_mask_input_size' {pvs_mask} != {sizes.mask_size}"
            )
        return cls(
            sizes=sizes,
            size=_field(data, "size", str, source),
            model_id=_field(data, "model_id", str, source),
            random_weights=_field(data, "random_weights", bool, source),
            seed=_field(data, "seed", int, source, optional=True),
            checkpoint=_field(data, "checkpoint", str, source, optional=True),
            max_keywords=_field(data, "max_keywords", int, source),
            pvs_points=_field(data, "pvs_points", int, source, optional=True),
            pvs_grid_batch=_field(data, "pvs_grid_batch", int, source, optional=True),
            pvs_grid_points=_field(data, "pvs_grid_points", int, source, optional=True),
            pvs_mask_input_size=pvs_mask,
            flavor=_field(data, "flavor", str, source, optional=True),
            device=_field(data, "device", str, source, optional=True),
            files=_field(data, "files", dict, source, optional=True) or {},
            source=source,
            data=json.loads(json.dumps(data)),
        )

    def with_entries(self, **entries: Any) -> Manifest:
        """A copy with more (or changed) JSON entries, validated again."""
        return Manifest.from_dict({**self.as_dict(), **entries}, self.source)


def load_manifest(path: str | os.PathLike) -> Manifest:
    """Read and validate `sam3_manifest.json` (give the file or the repository folder)."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_FILE
    if not path.is_file():
        raise MissingFile(f"no {MANIFEST_FILE} at {path}: is this a sam3-export repository?")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadData(f"{path} is not valid JSON: {exc}") from exc
    return Manifest.from_dict(data, str(path))


def manifest_from_config(config: Any) -> Manifest:
    """The manifest carried by a Triton model config (parameter `sam3_manifest`).

    `config` is anything with a `parameters` mapping of str -> str (the parsed config.pbtxt),
    or that mapping itself.
    """
    params = getattr(config, "parameters", config)
    if not isinstance(params, Mapping) or MANIFEST_PARAMETER not in params:
        raise InvalidInput(
            f"the model config has no '{MANIFEST_PARAMETER}' parameter: "
            "was the repository written by sam3-export?"
        )
    raw = params[MANIFEST_PARAMETER]
    raw = getattr(raw, "string_value", raw)
    source = f"config parameter {MANIFEST_PARAMETER}"
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, TypeError) as exc:
        raise BadData(f"{source} is not valid JSON: {exc}") from None
    return Manifest.from_dict(data, source)
