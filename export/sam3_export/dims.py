"""The model's sizes: `Sam3Dims` (the whole image model) and `PvsDims` (its interactive head).

Both reference one `napari_sam3.core.contract.Sizes`, the sizes the client reads back from the
manifest (image, patch, d_model, queries, text tokens, exemplar slots); only export-only
hyper-parameters live here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from napari_sam3.core import contract


@dataclass(frozen=True)
class PvsDims:
    """Sizes of the interactive head. `full()` is the published SAM3 configuration."""

    sizes: contract.Sizes
    mem_dim: int
    memory_ffn_dim: int
    memory_layers: int

    @classmethod
    def full(cls) -> PvsDims:
        return FULL.pvs

    @classmethod
    def tiny(cls) -> PvsDims:
        # d_model 32 keeps every official constraint: 8 heads in the two-way transformer
        # (downsample 2 -> 16 = 8 x 2), d_model // 8 channels for the stride-4 level, and an
        # axial-RoPE head dim divisible by 4 in the (unused here) memory attention.
        return TINY.pvs

    @property
    def image_size(self) -> int:
        return self.sizes.image_size

    @property
    def backbone_stride(self) -> int:
        return self.sizes.patch_size

    @property
    def d_model(self) -> int:
        return self.sizes.d_model

    @property
    def embed_size(self) -> int:
        """Side of the lowest-resolution level (72 at full size)."""
        return self.sizes.feature_size

    @property
    def low_res_size(self) -> int:
        """Side of the low-res mask logits and of the mask input (288 at full size)."""
        return self.sizes.mask_size


@dataclass(frozen=True)
class Sam3Dims:
    """Every size the SAM3 image model is built from (full = the official builder's values).

    `sizes` holds those the client needs too (they shape the graphs' tensors); the rest are
    export-only hyper-parameters.
    """

    name: str
    sizes: contract.Sizes
    vit_dim: int
    vit_depth: int
    vit_heads: int
    vit_mlp_ratio: float
    vit_window: int
    vit_global_blocks: tuple[int, ...]
    vit_pretrain_size: int
    heads: int
    ffn_dim: int
    encoder_layers: int
    decoder_layers: int
    geometry_layers: int
    scoring_hidden: int
    text_width: int
    text_heads: int
    text_layers: int
    vocab_size: int
    tracker_mem_dim: int
    tracker_layers: int
    tracker_ffn_dim: int

    @property
    def pvs(self) -> PvsDims:
        """The interactive head's sizes (the same image and neck sizes)."""
        return PvsDims(
            self.sizes,
            mem_dim=self.tracker_mem_dim,
            memory_ffn_dim=self.tracker_ffn_dim,
            memory_layers=self.tracker_layers,
        )


FULL = Sam3Dims(
    name="full",
    sizes=contract.Sizes(image_size=1008, d_model=256, num_queries=200),
    vit_dim=1024,
    vit_depth=32,
    vit_heads=16,
    vit_mlp_ratio=4.625,
    vit_window=24,
    vit_global_blocks=(7, 15, 23, 31),
    vit_pretrain_size=336,
    heads=8,
    ffn_dim=2048,
    encoder_layers=6,
    decoder_layers=6,
    geometry_layers=3,
    scoring_hidden=2048,
    text_width=1024,
    text_heads=16,
    text_layers=24,
    vocab_size=49408,
    tracker_mem_dim=64,
    tracker_layers=4,
    tracker_ffn_dim=2048,
)

# Same classes and code paths, small numbers: image 112 px -> 8x8 tokens, neck levels 32/16/8.
TINY = Sam3Dims(
    name="tiny",
    sizes=contract.Sizes(image_size=112, d_model=32, num_queries=16),
    vit_dim=64,
    vit_depth=2,
    vit_heads=4,
    vit_mlp_ratio=4.625,
    vit_window=4,
    vit_global_blocks=(1,),
    vit_pretrain_size=56,
    heads=4,
    ffn_dim=64,
    encoder_layers=2,
    decoder_layers=2,
    geometry_layers=2,
    scoring_hidden=64,
    text_width=64,
    text_heads=4,
    text_layers=2,
    vocab_size=49408,
    tracker_mem_dim=16,
    tracker_layers=1,
    tracker_ffn_dim=64,
)

SIZES: dict[str, Sam3Dims] = {"full": FULL, "tiny": TINY}


def dims_dict(dims: Sam3Dims) -> dict:
    """The dims as plain JSON-able values."""
    out = asdict(dims)
    out["vit_global_blocks"] = list(dims.vit_global_blocks)
    return out
