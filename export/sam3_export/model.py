"""Build the official SAM3 image model (grounding + interactive head), full size or tiny.

The official builder (`sam3.model_builder.build_sam3_image_model`) has no size arguments and
allocates on CUDA in two constructors, so this module constructs the same classes with the same
hyper-parameters from a `Sam3Dims` record (`sam3_export.dims`); `TINY` only shrinks the dimensions. Weights are either
random (seeded, every parameter touched so that no path is trivially zero) or loaded from a
checkpoint with strict key checks. Accepted layouts (`read_state_dict`):

- Meta's release `sam3.pt`: `detector.*` -> image model, `tracker.*` -> interactive head,
  optionally under `{"model": ...}`;
- the same with a DDP `module.` prefix on every key;
- a plain state dict of the image model (`Sam3Image.state_dict()` names, as fine-tuning scripts
  save it), optionally under `{"model": ...}` or `{"state_dict": ...}`;
- any of these as a `.safetensors` file.

A checkpoint without the interactive weights (`tracker.*` and the interactive neck) builds a
grounding-only model (`Sam3Build.has_interactive` False); missing grounding weights are an error.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import torch
from sam3.model.decoder import (
    TransformerDecoder,
    TransformerDecoderLayer,
)
from sam3.model.encoder import TransformerEncoderFusion, TransformerEncoderLayer
from sam3.model.geometry_encoders import SequenceGeometryEncoder
from sam3.model.maskformer_segmentation import PixelDecoder, UniversalSegmentationHead
from sam3.model.model_misc import MLP, DotProductScoring, TransformerWrapper
from sam3.model.model_misc import MultiheadAttentionWrapper as MultiheadAttention
from sam3.model.necks import Sam3DualViTDetNeck
from sam3.model.position_encoding import PositionEmbeddingSine
from sam3.model.sam1_task_predictor import SAM3InteractiveImagePredictor
from sam3.model.sam3_image import Sam3Image
from sam3.model.text_encoder_ve import VETextEncoder
from sam3.model.tokenizer_ve import SimpleTokenizer
from sam3.model.vitdet import ViT
from sam3.model.vl_combiner import SAM3VLBackbone

from napari_sam3.core.errors import RefusedError

from .dims import SIZES, Sam3Dims
from .pvs_model import build_pvs_predictor

log = logging.getLogger(__name__)

DETECTOR_PREFIX = "detector."
TRACKER_PREFIX = "tracker."
DDP_PREFIX = "module."
# Where the interactive head lives inside Sam3Image (the official loader maps `tracker.` here).
INTERACTIVE_ATTR = "inst_interactive_predictor.model."
# The interactive neck: part of the detector's backbone, used only by the interactive head (an
# image model built without interactivity, as fine-tuning does, has none).
INTERACTIVE_NECK = "backbone.vision_backbone.sam2_convs."
INTERACTIVE_KEYS = (INTERACTIVE_ATTR, INTERACTIVE_NECK)
# Containers fine-tuning scripts wrap a state dict in.
WRAPPER_KEYS = ("model", "state_dict")
# Buffers that are pure functions of the configuration; a checkpoint may omit them.
DERIVED_BUFFER_SUFFIXES = ("freqs_cis", "relative_coords")


class CheckpointError(RefusedError, ValueError):
    """The given checkpoint cannot be used (missing, not a checkpoint, or keys missing)."""


@dataclass
class Sam3Build:
    """A built model and where its weights came from."""

    model: Sam3Image
    dims: Sam3Dims
    random_weights: bool
    seed: int | None
    checkpoint_name: str | None = None
    # False: the checkpoint had no interactive weights; only the grounding graphs are usable.
    has_interactive: bool = True

    @property
    def interactive(self) -> SAM3InteractiveImagePredictor:
        """The interactive (PVS) head: `.model` is the official `Sam3TrackerPredictor`."""
        return self.model.inst_interactive_predictor


def bpe_path() -> str:
    """The CLIP BPE vocabulary shipped with napari-sam3 (the sam3 wheel does not ship it)."""
    return str(resources.files("napari_sam3") / "data" / "bpe_simple_vocab_16e6.txt.gz")


def _attention(d: Sam3Dims, batch_first: bool | None = None, dropout: float = 0.1):
    kwargs = {} if batch_first is None else {"batch_first": batch_first}
    return MultiheadAttention(
        num_heads=d.heads, dropout=dropout, embed_dim=d.sizes.d_model, **kwargs
    )


def _vision(d: Sam3Dims) -> Sam3DualViTDetNeck:
    vit = ViT(
        img_size=d.sizes.image_size,
        pretrain_img_size=d.vit_pretrain_size,
        patch_size=d.sizes.patch_size,
        embed_dim=d.vit_dim,
        depth=d.vit_depth,
        num_heads=d.vit_heads,
        mlp_ratio=d.vit_mlp_ratio,
        norm_layer="LayerNorm",
        drop_path_rate=0.1,
        qkv_bias=True,
        use_abs_pos=True,
        tile_abs_pos=True,
        global_att_blocks=d.vit_global_blocks,
        rel_pos_blocks=(),
        use_rope=True,
        use_interp_rope=True,
        window_size=d.vit_window,
        pretrain_use_cls_token=True,
        retain_cls_token=False,
        ln_pre=True,
        ln_post=False,
        return_interm_layers=False,
        bias_patch_embed=False,
    )
    # The official builder precomputes this cache on CUDA (at sizes the model never uses);
    # it is warmed on CPU at the real neck sizes in `_warm_caches`.
    pos = PositionEmbeddingSine(num_pos_feats=d.sizes.d_model, normalize=True, temperature=10000)
    return Sam3DualViTDetNeck(
        trunk=vit,
        position_encoding=pos,
        d_model=d.sizes.d_model,
        scale_factors=[4.0, 2.0, 1.0, 0.5],
        add_sam2_neck=True,
    )


def _text(d: Sam3Dims) -> VETextEncoder:
    return VETextEncoder(
        tokenizer=SimpleTokenizer(bpe_path=bpe_path()),
        d_model=d.sizes.d_model,
        width=d.text_width,
        heads=d.text_heads,
        layers=d.text_layers,
        context_length=d.sizes.text_tokens,
        vocab_size=d.vocab_size,
    )


def _transformer(d: Sam3Dims) -> TransformerWrapper:
    encoder_layer = TransformerEncoderLayer(
        activation="relu",
        d_model=d.sizes.d_model,
        dim_feedforward=d.ffn_dim,
        dropout=0.1,
        pos_enc_at_attn=True,
        pos_enc_at_cross_attn_keys=False,
        pos_enc_at_cross_attn_queries=False,
        pre_norm=True,
        self_attention=_attention(d, batch_first=True),
        cross_attention=_attention(d, batch_first=True),
    )
    encoder = TransformerEncoderFusion(
        layer=encoder_layer,
        num_layers=d.encoder_layers,
        d_model=d.sizes.d_model,
        num_feature_levels=1,
        frozen=False,
        use_act_checkpoint=True,
        add_pooled_text_to_img_feat=False,
        pool_text_with_mask=True,
    )
    decoder_layer = TransformerDecoderLayer(
        activation="relu",
        d_model=d.sizes.d_model,
        dim_feedforward=d.ffn_dim,
        dropout=0.1,
        cross_attention=_attention(d),
        n_heads=d.heads,
        use_text_cross_attention=True,
    )
    # resolution/stride are left unset: with them the constructor allocates its coordinate
    # cache on CUDA. The same cache is filled on CPU in `_warm_caches`.
    decoder = TransformerDecoder(
        layer=decoder_layer,
        num_layers=d.decoder_layers,
        num_queries=d.sizes.num_queries,
        return_intermediate=True,
        box_refine=True,
        num_o2m_queries=0,
        dac=True,
        boxRPB="log",
        d_model=d.sizes.d_model,
        frozen=False,
        interaction_layer=None,
        dac_use_selfatt_ln=True,
        use_act_checkpoint=True,
        presence_token=True,
    )
    return TransformerWrapper(encoder=encoder, decoder=decoder, d_model=d.sizes.d_model)


def _scoring(d: Sam3Dims) -> DotProductScoring:
    prompt_mlp = MLP(
        input_dim=d.sizes.d_model,
        hidden_dim=d.scoring_hidden,
        output_dim=d.sizes.d_model,
        num_layers=2,
        dropout=0.1,
        residual=True,
        out_norm=torch.nn.LayerNorm(d.sizes.d_model),
    )
    return DotProductScoring(d_model=d.sizes.d_model, d_proj=d.sizes.d_model, prompt_mlp=prompt_mlp)


def _segmentation(d: Sam3Dims) -> UniversalSegmentationHead:
    return UniversalSegmentationHead(
        hidden_dim=d.sizes.d_model,
        upsampling_stages=3,
        aux_masks=False,
        presence_head=False,
        dot_product_scorer=None,
        act_ckpt=True,
        cross_attend_prompt=_attention(d, dropout=0.0),
        pixel_decoder=PixelDecoder(
            num_upsampling_stages=3, interpolation_mode="nearest", hidden_dim=d.sizes.d_model
        ),
    )


def _geometry(d: Sam3Dims) -> SequenceGeometryEncoder:
    layer = TransformerEncoderLayer(
        activation="relu",
        d_model=d.sizes.d_model,
        dim_feedforward=d.ffn_dim,
        dropout=0.1,
        pos_enc_at_attn=False,
        pre_norm=True,
        self_attention=_attention(d, batch_first=False),
        pos_enc_at_cross_attn_queries=False,
        pos_enc_at_cross_attn_keys=True,
        cross_attention=_attention(d, batch_first=False),
    )
    return SequenceGeometryEncoder(
        pos_enc=PositionEmbeddingSine(
            num_pos_feats=d.sizes.d_model, normalize=True, temperature=10000
        ),
        encode_boxes_as_points=False,
        points_direct_project=True,
        points_pool=True,
        points_pos_enc=True,
        boxes_direct_project=True,
        boxes_pool=True,
        boxes_pos_enc=True,
        d_model=d.sizes.d_model,
        num_layers=d.geometry_layers,
        layer=layer,
        use_act_ckpt=True,
        add_cls=True,
        add_post_encode_proj=True,
    )


def _interactive(d: Sam3Dims) -> SAM3InteractiveImagePredictor:
    return build_pvs_predictor(d.pvs, seed=None).train()


def _warm_caches(model: Sam3Image, d: Sam3Dims) -> None:
    """Fill, on CPU, the caches the official constructors would fill on CUDA.

    Both are read (never written) while a graph is traced, so tracing leaves no fake tensors
    behind in the module.
    """
    neck = model.backbone.vision_backbone
    for size in d.sizes.fpn_sizes + (d.sizes.feature_size // 2,):
        neck.position_encoding(torch.zeros(1, 1, size, size))
    decoder = model.transformer.decoder
    f = d.sizes.feature_size
    decoder.compilable_cord_cache = decoder._get_coords(f, f, device="cpu")
    decoder.compilable_stored_size = (f, f)


def _check_dims(d: Sam3Dims) -> None:
    if (d.vit_dim // d.vit_heads) % 4:
        raise ValueError("ViT head dim must be divisible by 4 (axial RoPE)")
    if d.sizes.d_model % 8 or d.sizes.d_model % d.heads:
        raise ValueError("d_model must be divisible by 8 (GroupNorm) and by heads")


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Overwrite every parameter with seeded random values of a sensible scale.

    The constructors leave some parameters zero (box-refinement heads) or uninitialised
    (`torch.empty` in the text encoder); parity tests must exercise every path.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim >= 2:
                fan_in = max(1, math.prod(p.shape[1:]))
                p.copy_(noise / math.sqrt(fan_in))
            elif name.endswith("weight") or name.endswith("gamma"):
                p.copy_(1.0 + 0.1 * noise)
            else:
                p.copy_(0.02 * noise)


def _build_model(d: Sam3Dims) -> Sam3Image:
    _check_dims(d)
    backbone = SAM3VLBackbone(visual=_vision(d), text=_text(d), scalp=1)
    model = Sam3Image(
        backbone=backbone,
        transformer=_transformer(d),
        input_geometry_encoder=_geometry(d),
        segmentation_head=_segmentation(d),
        num_feature_levels=1,
        o2m_mask_predict=True,
        dot_prod_scoring=_scoring(d),
        use_instance_query=False,
        multimask_output=True,
        inst_interactive_predictor=_interactive(d),
        matcher=None,
    )
    return model


def split_state_dict(model: Sam3Image) -> dict[str, torch.Tensor]:
    """The model's weights in the official checkpoint layout (`detector.*`, `tracker.*`)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        if key.startswith(INTERACTIVE_ATTR):
            out[TRACKER_PREFIX + key[len(INTERACTIVE_ATTR) :]] = value
        elif key.startswith("inst_interactive_predictor."):
            continue  # the predictor wrapper itself holds no weights of its own
        else:
            out[DETECTOR_PREFIX + key] = value
    return out


def save_checkpoint(model: Sam3Image, path: str | os.PathLike) -> None:
    """Write the weights in the official `sam3.pt` format (keys `detector.*` / `tracker.*`)."""
    torch.save({"model": split_state_dict(model)}, path)


def _load_file(path: Path) -> object:
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    if path.suffix.lower() == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(path, device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            raise CheckpointError(f"{path} is not a readable .safetensors file: {exc}") from exc
    try:
        try:  # memory-mapped: a full checkpoint is not held twice while loading
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # legacy format
    except Exception as exc:  # torch raises many kinds for a file that is no checkpoint
        raise CheckpointError(f"{path} is not a readable torch checkpoint: {exc}") from exc


def read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """A checkpoint in any accepted layout, as `Sam3Image.state_dict()` names.

    Keys the image model cannot use stay in (the loader warns about them).
    """
    path = Path(path)
    ckpt = _load_file(path)
    while isinstance(ckpt, Mapping):
        inner = [ckpt[k] for k in WRAPPER_KEYS if isinstance(ckpt.get(k), Mapping)]
        if not inner:
            break
        ckpt = inner[0]
    if not isinstance(ckpt, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in ckpt.items()
    ):
        raise CheckpointError(f"{path} is not a state dict of tensors")
    if ckpt and all(k.startswith(DDP_PREFIX) for k in ckpt):
        ckpt = {k[len(DDP_PREFIX) :]: v for k, v in ckpt.items()}
    if not any(k.startswith((DETECTOR_PREFIX, TRACKER_PREFIX)) for k in ckpt):
        return dict(ckpt)  # a plain image-model state dict
    mapped: dict[str, torch.Tensor] = {}
    for key, value in ckpt.items():
        if key.startswith(DETECTOR_PREFIX):
            mapped[key[len(DETECTOR_PREFIX) :]] = value
        elif key.startswith(TRACKER_PREFIX):
            mapped[INTERACTIVE_ATTR + key[len(TRACKER_PREFIX) :]] = value
        else:
            mapped["<unmapped>." + key] = value
    return mapped


def _listing(keys: list[str]) -> str:
    shown = "\n  ".join(keys[:50])
    more = f"\n  ... and {len(keys) - 50} more" if len(keys) > 50 else ""
    return f"\n  {shown}{more}"


def load_checkpoint_(model: Sam3Image, path: str | os.PathLike) -> bool:
    """Load a checkpoint (any layout of `read_state_dict`); raise `CheckpointError` listing
    every missing key. Returns whether it held the interactive head's weights."""
    path = Path(path)
    mapped = read_state_dict(path)
    expected = model.state_dict()
    known = [k for k in mapped if k in expected]
    if not known:
        raise CheckpointError(
            f"{path} has none of the SAM3 image model's weights: not a SAM3 checkpoint "
            f"(first keys: {sorted(mapped)[:5]}). Accepted: Meta's release sam3.pt "
            "(detector.*/tracker.*), a DDP module.* copy of it, or a plain image-model state dict"
        )
    required = [k for k in expected if not k.endswith(DERIVED_BUFFER_SUFFIXES)]
    interactive_keys = [k for k in required if k.startswith(INTERACTIVE_KEYS)]
    has_interactive = any(k in mapped for k in interactive_keys)
    if not has_interactive:
        required = [k for k in required if not k.startswith(INTERACTIVE_KEYS)]
    missing = sorted(k for k in required if k not in mapped)
    if missing:
        raise CheckpointError(
            f"{path} lacks {len(missing)} of the model's {len(expected)} weights "
            f"(a checkpoint of another model, or of another --size?):{_listing(missing)}"
        )
    wrong = [
        f"{k}: checkpoint {tuple(mapped[k].shape)} vs model {tuple(v.shape)}"
        for k, v in expected.items()
        if k in mapped and mapped[k].shape != v.shape
    ]
    if wrong:
        raise CheckpointError(f"{path} has weights of the wrong shape:\n  " + "\n  ".join(wrong))
    unexpected = sorted(k for k in mapped if k not in expected)
    if unexpected:
        log.warning(
            "ignoring %d checkpoint keys the image model does not use: %s%s",
            len(unexpected),
            unexpected[:10],
            " ..." if len(unexpected) > 10 else "",
        )
    if not has_interactive:
        log.warning(
            "%s has no interactive (tracker.*) weights: only the grounding graphs are exported",
            path.name,
        )
    model.load_state_dict({k: v for k, v in mapped.items() if k in expected}, strict=False)
    return has_interactive


def build_sam3(
    size: str = "tiny",
    seed: int | None = 0,
    checkpoint: str | os.PathLike | None = None,
) -> Sam3Build:
    """Build the SAM3 image model (with its interactive head) on CPU, in eval mode.

    With `checkpoint`, its weights are loaded (strictly: missing keys are an error, never a
    silent fall back to random weights) and `seed` is ignored; without, the weights are random
    from `seed`.
    """
    if size not in SIZES:
        raise ValueError(f"size must be one of {sorted(SIZES)}, not {size!r}")
    dims = SIZES[size]
    if checkpoint is None and seed is None:
        raise ValueError("random weights need a seed")
    if checkpoint is not None and not Path(checkpoint).is_file():
        raise CheckpointError(f"checkpoint not found: {checkpoint}")
    # Some constructors draw from the global RNG (e.g. a random-Fourier buffer of the prompt
    # encoder): seed it, without disturbing the caller's RNG state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0 if seed is None else seed)
        model = _build_model(dims)
    has_interactive = True
    if checkpoint is None:
        randomize_(model, seed)
    else:
        has_interactive = load_checkpoint_(model, checkpoint)
    model.eval()
    _warm_caches(model, dims)
    return Sam3Build(
        model=model,
        dims=dims,
        random_weights=checkpoint is None,
        seed=seed if checkpoint is None else None,
        checkpoint_name=None if checkpoint is None else Path(checkpoint).name,
        has_interactive=has_interactive,
    )


def model_id(model: torch.nn.Module, interactive: bool = True) -> str:
    """sha256 over every weight (name, dtype, shape, bytes), in name order.

    `interactive=False`: without the interactive head's weights (a grounding-only checkpoint,
    whose interactive weights are only constructor defaults).
    """
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        if not interactive and name.startswith(INTERACTIVE_KEYS):
            continue
        t = tensor.detach().contiguous().cpu()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(tuple(t.shape)).encode())
        if t.is_complex():
            t = torch.view_as_real(t)
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()
