"""Build SAM3's interactive (PVS) predictor at any size, without a GPU and without the ViT.

`sam3.model_builder.build_tracker` has no size arguments (image 1008, d_model 256, memory
attention over 72x72) and its mask-memory position encoding pre-computes its cache with
`device="cuda"`, so it cannot run on a CPU-only machine. The interactive image path only uses
the tracker's prompt encoder, mask decoder and `no_mem_embed`, but the state-dict layout of the
whole tracker must match the checkpoint's `tracker.*` keys, so this module constructs the SAME
official classes as `build_tracker` with the same hyper-parameters, parametrised by size (the
tests check the full-size state dict against `build_tracker`'s). `sam3_export.model` builds the
same head inside the whole image model; this builder is for the parity tests and the bench,
which need the head alone (no ViT, no text encoder):

- `image_size` and `backbone_stride` give the embedding size `e = image_size // backbone_stride`
  (72 at full size) and the interactive neck levels `4e, 2e, e` (288, 144, 72);
- `d_model` is the neck / prompt width (256 at full size); `mem_dim` the memory width (64).

The image predictor (`SAM3InteractiveImagePredictor`) hard-codes its feature sizes
(`_bb_feat_sizes = 288, 144, 72`); they are set from `image_size` here.
"""

from __future__ import annotations

import torch
from sam3.model.decoder import TransformerDecoderLayerv2, TransformerEncoderCrossAttention
from sam3.model.memory import CXBlock, SimpleFuser, SimpleMaskDownSampler, SimpleMaskEncoder
from sam3.model.model_misc import TransformerWrapper
from sam3.model.position_encoding import PositionEmbeddingSine
from sam3.model.sam1_task_predictor import SAM3InteractiveImagePredictor
from sam3.model.sam3_tracker_base import Sam3TrackerBase
from sam3.model.sam3_tracking_predictor import Sam3TrackerPredictor
from sam3.sam.transformer import RoPEAttention

from napari_sam3.core import contract

from .dims import PvsDims

__all__ = ["PvsDims", "build_pvs_predictor", "sizes_of_tracker", "tracker_of"]


def _memory_encoder(dims: PvsDims) -> SimpleMaskEncoder:
    e = dims.embed_size
    return SimpleMaskEncoder(
        out_dim=dims.mem_dim,
        in_dim=dims.d_model,
        # precompute_resolution=None: the official 1008 pre-computes its cache on "cuda"; the
        # cache holds no weights, so leaving it empty changes nothing in the state dict.
        position_encoding=PositionEmbeddingSine(
            num_pos_feats=dims.mem_dim, normalize=True, scale=None, temperature=10000
        ),
        mask_downsampler=SimpleMaskDownSampler(
            embed_dim=dims.d_model,
            kernel_size=3,
            stride=2,
            padding=1,
            interpol_size=[16 * e, 16 * e],
        ),
        fuser=SimpleFuser(
            layer=CXBlock(
                dim=dims.d_model,
                kernel_size=7,
                padding=3,
                layer_scale_init_value=1.0e-06,
                use_dwconv=True,
            ),
            num_layers=2,
        ),
    )


def _memory_transformer(dims: PvsDims) -> TransformerWrapper:
    e = dims.embed_size
    common = dict(
        embedding_dim=dims.d_model,
        num_heads=1,
        downsample_rate=1,
        dropout=0.1,
        rope_theta=10000.0,
        feat_sizes=[e, e],
        use_fa3=False,
        use_rope_real=False,
    )
    layer = TransformerDecoderLayerv2(
        cross_attention_first=False,
        activation="relu",
        dim_feedforward=dims.memory_ffn_dim,
        dropout=0.1,
        pos_enc_at_attn=False,
        pre_norm=True,
        self_attention=RoPEAttention(**common),
        d_model=dims.d_model,
        pos_enc_at_cross_attn_keys=True,
        pos_enc_at_cross_attn_queries=False,
        cross_attention=RoPEAttention(**common, kv_in_dim=dims.mem_dim, rope_k_repeat=True),
    )
    encoder = TransformerEncoderCrossAttention(
        remove_cross_attention_layers=[],
        batch_first=True,
        d_model=dims.d_model,
        frozen=False,
        pos_enc_at_input=True,
        layer=layer,
        num_layers=dims.memory_layers,
        use_act_checkpoint=False,
    )
    return TransformerWrapper(encoder=encoder, decoder=None, d_model=dims.d_model)


def build_pvs_predictor(
    dims: PvsDims | None = None, seed: int | None = 0
) -> SAM3InteractiveImagePredictor:
    """The official interactive image predictor, random weights, no image backbone, eval mode.

    With `PvsDims.full()` its state dict has the keys and shapes of the official
    `build_tracker(apply_temporal_disambiguation=False)`.
    """
    dims = dims or PvsDims.full()
    if seed is not None:
        torch.manual_seed(seed)
    tracker = Sam3TrackerPredictor(
        image_size=dims.image_size,
        num_maskmem=7,
        backbone=None,
        backbone_stride=dims.backbone_stride,
        transformer=_memory_transformer(dims),
        maskmem_backbone=_memory_encoder(dims),
        multimask_output_in_sam=True,
        forward_backbone_per_frame_for_eval=True,
        trim_past_non_cond_mem_for_eval=False,
        multimask_output_for_tracking=True,
        multimask_min_pt_num=0,
        multimask_max_pt_num=1,
        always_start_from_first_ann_frame=False,
        non_overlap_masks_for_mem_enc=False,
        non_overlap_masks_for_output=False,
        max_cond_frames_in_attn=4,
        offload_output_to_cpu_for_eval=False,
        # The official tracker's values (they only decide `multimask_output=False`, which the
        # exported graphs do not compute).
        sam_mask_decoder_extra_args={
            "dynamic_multimask_via_stability": True,
            "dynamic_multimask_stability_delta": 0.05,
            "dynamic_multimask_stability_thresh": 0.98,
        },
        clear_non_cond_mem_around_input=True,
        fill_hole_area=0,
        use_memory_selection=False,
    )
    predictor = SAM3InteractiveImagePredictor(tracker)
    e = dims.embed_size
    predictor._bb_feat_sizes = [(4 * e, 4 * e), (2 * e, 2 * e), (e, e)]
    return predictor.eval()


def tracker_of(model_or_parts: object) -> Sam3TrackerBase:
    """The tracker (`Sam3TrackerBase`) inside a `Sam3Image` built with
    `enable_inst_interactivity=True`, a `SAM3InteractiveImagePredictor`, or the tracker itself."""
    obj = model_or_parts
    if isinstance(getattr(obj, "interactive", None), SAM3InteractiveImagePredictor):
        obj = obj.interactive  # sam3_export.model.Sam3Build
    if getattr(obj, "inst_interactive_predictor", None) is not None:
        obj = obj.inst_interactive_predictor
    if isinstance(obj, SAM3InteractiveImagePredictor):
        obj = obj.model
    if not isinstance(obj, Sam3TrackerBase):
        raise TypeError(
            f"expected a Sam3Image with its interactive predictor, a "
            f"SAM3InteractiveImagePredictor or a Sam3TrackerBase, got {type(model_or_parts).__name__}"
        )
    return obj


def sizes_of_tracker(model_or_parts: object) -> contract.Sizes:
    """The contract sizes read back from a built tracker (only image, stride and width shape the
    interactive graphs; the grounding-only sizes are zero)."""
    tracker = tracker_of(model_or_parts)
    return contract.Sizes(
        image_size=int(tracker.image_size),
        d_model=int(tracker.hidden_dim),
        num_queries=0,
        patch_size=int(tracker.backbone_stride),
    )
