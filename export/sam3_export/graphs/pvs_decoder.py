"""`sam3_pvs_decoder`: SAM3's interactive (PVS) head as a static-shape graph.

Inputs: what the unified encoder writes for the interactive head (`PvsImageSide`: the neck's three
levels channels-last and the first two-way layer's projections of the image), then a prompt
in fixed slots. Outputs: 3 candidate masks as low-res logits and their predicted IoU (the
official `predict(multimask_output=True)`). The single-mask output (`multimask_output=False`)
is not exported: nothing reads it (the client shows the best of the three candidates).

Prompt slots (coordinates in model-input pixels, 0..S, like every coordinate of the contract):

- `point_coords` [B,P,2] (x, y) and `point_labels` [B,P] float32: 1 positive, 0 negative,
  -1 an empty slot. Any other label is an empty slot too.
- `box` [B,4] xyxy and `has_box` [B] bool.
- `mask_input` [B,1,m,m] low-res logits (the previous best `pvs_masks` row, or a painted seed
  mask as +-10 logits) and `has_mask` [B] bool.

Exactness with static shapes. The official predictor builds a variable-length token list: the
box corners (labels 2, 3), then the points, then one padding point (label -1) that SAM always
appends; with no point and no box there are no prompt tokens at all. A padding token is NOT
neutral in SAM (it is a token every attention sees), so empty slots cannot simply be filled with
label -1. Here the token list is [box corners, P point slots, SAM's padding point] and every
token that the official predictor would not have is removed from the attention as a key (in the
token self-attention and in the image-to-token attention; tokens are never keys elsewhere).
Masked tokens still compute garbage as queries, which nothing reads. The result equals the
official predictor up to float rounding.

Documented clipping (the graph never fails on values; the client refuses bad prompts first):
points and boxes are clamped to [0, S]; a box's corners are sorted (an inverted box becomes its
upright twin; a zero-area box is two identical corners, as the official predictor would embed it);
`mask_input` is clamped to [-32, 32], the range the official predictor clamps the logits it
returns to before they are fed back, so refinement from `pvs_masks` (returned unclamped, so that
upscaling them matches the official full-resolution masks) is the official refinement.

The image features enter with batch 1 and are broadcast inside the graph: a batch of prompts never
copies them. `sam3_pvs_decoder_grid` is the same head for the automatic ("everything") mode
(`napari_sam3.client.automatic`): `PVS_GRID_BATCH` (4) prompts of `PVS_GRID_POINTS` (1) point each,
no box slots, no mask input, multimask outputs only. Two graphs because shapes are static: a
click must not pay for a batch.

Names and shapes are `napari_sam3.core.contract`'s (`pvs_graph_io`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor, nn

from napari_sam3.core import contract

from ..pvs_model import sizes_of_tracker, tracker_of

PVS_GRID_POINTS = contract.PVS_GRID_POINTS
# Prompts per grid call. Measured at full size, one thread: 75 CPU-ms per prompt at batch 1 or
# 4, 82 at 8, 88 at 16 (the [B, 32, 288, 288] intermediates stop fitting in cache).
PVS_GRID_BATCH = contract.PVS_GRID_BATCH
MASK_INPUT_CLAMP = 32.0  # the official predictor clamps returned low-res logits to +-32


def _masked_attention(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor, valid: Tensor) -> Tensor:
    """The official `sam3.sam.transformer.Attention(q, k, v)` over only the keys where `valid`
    [B, Nk] (the token self-attention). See `_masked_keys`."""
    q = _heads(attn, attn.q_proj(q))
    k, v, bias = _masked_keys(attn, k, v, valid)
    logits = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    return attn.out_proj(attn._recombine_heads(logits.softmax(dim=-1) @ v))


def _heads(attn: nn.Module, x: Tensor) -> Tensor:
    return attn._separate_heads(x, attn.num_heads)


def _masked_keys(
    attn: nn.Module, k: Tensor, v: Tensor, valid: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Keys and values projected and split into heads [B, heads, Nk, d], and a logit bias
    [B, 1, 1, Nk] that leaves only the keys where `valid` [B, Nk] in the softmax.

    Key 0 must be valid (it is an output token). Every other key is replaced by a copy of key 0
    (key and value), and key 0 with its n copies each get a logit bias of -log(1 + n): together
    they weigh exactly what key 0 alone weighs, so the softmax over the real keys is the
    official one (up to rounding). This costs one broadcast add on the logits; a -inf mask
    would too, but then exp underflows, which sends ONNX Runtime's Softmax down a slow path
    (20x on [1,8,5184,26]), and a mask relative to the row maximum costs three passes over the
    logits.
    """
    k = _heads(attn, attn.k_proj(k))
    v = _heads(attn, attn.v_proj(v))
    keep = valid[:, None, :, None]
    k = torch.where(keep, k, k[:, :, :1])
    v = torch.where(keep, v, v[:, :, :1])
    copies = (~valid).sum(dim=-1, keepdim=True).to(k.dtype)  # [B, 1]
    shares = torch.cat([torch.ones_like(valid[:, :1]), ~valid[:, 1:]], dim=1)
    bias = torch.where(shares, -torch.log1p(copies), 0.0)[:, None, None, :]
    return k, v, bias


# The attention between the tokens and the image is written as plain products: OpenVINO fuses
# MatMul-Softmax-MatMul (and the exported scaled_dot_product_attention) into its attention
# kernels, which on these shapes (25 tokens, 16 channels a head, 5184 image positions) ran
# slower than the products alone, and a softmax along 25-long rows slower than down 25-long
# columns of the image's positions. With the first layer's projections channels first, a
# click's graph at full size, OpenVINO bf16, paired: 0.87x on one thread, 0.92x on two (fp32
# 0.99x; docs/benchmarks.md).
def _image_to_tokens(
    attn: nn.Module, queries_t: Tensor, k: Tensor, v: Tensor, valid: Tensor
) -> Tensor:
    """The official `Attention(q, k, v)` of the image's positions over the tokens, keys masked
    where not `valid` (`_masked_keys`), for queries already projected, per head channels first
    [B, heads, d, hw]: the softmax runs down the [B, heads, Nk, hw] logits' columns."""
    k, v, bias = _masked_keys(attn, k, v, valid)
    logits = (k @ queries_t) * (1.0 / math.sqrt(k.shape[-1])) + bias.transpose(-2, -1)
    out = (v.transpose(-2, -1) @ logits.softmax(dim=-2)).transpose(-2, -1)  # [B, h, hw, d]
    return attn.out_proj(attn._recombine_heads(out))


def _token_to_image(attn: nn.Module, q: Tensor, keys_t: Tensor, values_t: Tensor) -> Tensor:
    """The official `Attention(q, k, v)` of the tokens over the image, for image keys and values
    already projected, per head channels first [1 or B, heads, d, hw]."""
    q = _heads(attn, attn.q_proj(q))
    weights = ((q @ keys_t) * (1.0 / math.sqrt(q.shape[-1]))).softmax(dim=-1)  # [B, h, n, hw]
    out = (values_t @ weights.transpose(-2, -1)).transpose(-2, -1)  # [B, h, n, d]
    return attn.out_proj(attn._recombine_heads(out))


def _heads_channels_first(attn: nn.Module, linear: nn.Linear, x: Tensor) -> Tensor:
    """`linear(x)` for x [B, hw, C], split into heads with each head's channels first."""
    return _heads(attn, linear(x)).transpose(-2, -1)


def _first_layer_projections(layer: nn.Module) -> tuple[tuple[nn.Linear, bool], ...]:
    """The first two-way layer's projections of the image, in `contract.PVS_FIRST_LAYER`'s
    order, each with whether its input carries the position encoding: token-to-image keys (yes)
    and values (no), image-to-token queries (yes)."""
    to_image, to_tokens = layer.cross_attn_token_to_image, layer.cross_attn_image_to_token
    return ((to_image.k_proj, True), (to_image.v_proj, False), (to_tokens.q_proj, True))


def _attention_through_inputs(attn: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The official `sam3.sam.transformer.Attention(q, k, v)` for a few queries over many keys,
    computed on the input side of the key and value projections: logits `(q Wk) k^T` and
    output `(P v) Wv^T + bv`, never projecting the keys. Exact up to rounding: the key bias adds
    one constant to a query's every logit (softmax drops it), and a row of P sums to 1.

    The final token-to-image attention of a click reads 4 queries over 5184 keys at full size:
    85 M multiply-adds here against 340 M for projecting every key. `P v` is written as
    `(v^T P^T)^T` so that OpenVINO does not fuse MatMul-Softmax-MatMul into its attention
    snippet, measured twice as slow as two plain matmuls on this [32, 5184] shape in bf16.
    """
    heads = attn.num_heads
    b, n, _ = q.shape
    q = _heads(attn, attn.q_proj(q))  # [B, h, n, d]
    d = q.shape[-1]
    w_k = attn.k_proj.weight.reshape(heads, d, -1)  # [h, d, C]
    w_v = attn.v_proj.weight.reshape(heads, d, -1)
    logits = ((q @ w_k) * (1.0 / math.sqrt(d))).reshape(b, heads * n, -1) @ k.transpose(1, 2)
    weights = logits.softmax(dim=-1)  # [B, h*n, Nk]
    pooled = (v.transpose(1, 2) @ weights.transpose(1, 2)).transpose(1, 2)  # [B, h*n, C]
    out = pooled.reshape(b, heads, n, -1) @ w_v.transpose(1, 2) + attn.v_proj.bias.reshape(
        heads, 1, d
    )
    return attn.out_proj(attn._recombine_heads(out))


def _unfused_add(x: Tensor, y: Tensor) -> Tensor:
    """`x + y`, written `x - (-y)`: the same bits in IEEE arithmetic, but not the Add that
    ONNX Runtime fuses with the following LayerNorm into its CPU SkipLayerNormalization kernel,
    measured 5.5x slower than Add + LayerNormalization on [1, 5184, 256] (ORT 1.32); per click
    at full size, 2 threads: 53 ms with the fusion, 47.5 ms without."""
    return x - (-y)


class PvsDecoder(nn.Module):
    """Prompt encoder + mask decoder of the official tracker: fixed slots, one image."""

    def __init__(self, model_or_parts: object) -> None:
        super().__init__()
        tracker = tracker_of(model_or_parts)
        self.prompt_encoder = tracker.sam_prompt_encoder
        self.mask_decoder = tracker.sam_mask_decoder
        self.no_mem_embed = tracker.no_mem_embed
        self.image_size = int(tracker.image_size)
        if not self.mask_decoder.use_high_res_features:
            raise ValueError("SAM3's interactive head uses the high-resolution levels")

    # -- prompt encoding ------------------------------------------------------------------------
    def _sparse(
        self,
        point_coords: Tensor,
        point_labels: Tensor,
        box: Tensor | None = None,
        has_box: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Token embeddings [B, (2)+P+1, C] and their validity (the official token list)."""
        b = point_coords.shape[0]
        s = float(self.image_size)
        labels = point_labels.float()
        is_point = (labels == 0) | (labels == 1)
        labels = torch.where(is_point, labels, torch.full_like(labels, -1.0))
        # Empty slots are zeroed first: whatever they hold (even NaN) must not reach a value
        # that the masked attention still multiplies by its tiny weight.
        coords = torch.where(is_point[..., None], point_coords.float(), 0.0).clamp(0.0, s)
        any_prompt = is_point.any(dim=1)
        parts_coords, parts_labels, parts_valid = [], [], []
        if box is not None:
            box = torch.where(has_box[:, None], box.float(), 0.0).clamp(0.0, s)
            x1 = torch.minimum(box[:, 0], box[:, 2])
            x2 = torch.maximum(box[:, 0], box[:, 2])
            y1 = torch.minimum(box[:, 1], box[:, 3])
            y2 = torch.maximum(box[:, 1], box[:, 3])
            parts_coords.append(torch.stack([x1, y1, x2, y2], dim=-1).reshape(b, 2, 2))
            parts_labels.append(torch.tensor([2.0, 3.0]).expand(b, 2))
            parts_valid.append(has_box[:, None].expand(b, 2))
            any_prompt = any_prompt | has_box
        parts_coords += [coords, torch.zeros(b, 1, 2)]
        parts_labels += [labels, torch.full((b, 1), -1.0)]
        parts_valid += [is_point, any_prompt[:, None]]
        # The official code path: box corners are points labelled 2 and 3, and SAM's padding
        # point is already in the list (hence pad=False).
        tokens = self.prompt_encoder._embed_points(
            torch.cat(parts_coords, dim=1), torch.cat(parts_labels, dim=1), pad=False
        )
        return tokens, torch.cat(parts_valid, dim=1)

    def _dense(
        self, mask_input: Tensor, has_mask: Tensor, first: tuple[Tensor, Tensor, Tensor]
    ) -> tuple[Tensor, tuple[Tensor, ...]]:
        """The dense prompt [B, hw, C] (the mask embedding, or SAM's "no mask" embedding), and
        the first layer's image-side projections `first` (made with "no mask", see
        `PvsImageSide`) moved by what the mask embedding changes in them.

        The embedding's last layer is a 1x1 convolution W h + b of a 16-channel map h, so a
        projection P of it is (P W) h + P b: a 16-channel product per projection instead of the
        256-channel one that `first` saves.
        """
        encoder = self.prompt_encoder
        mask = mask_input.float().clamp(-MASK_INPUT_CLAMP, MASK_INPUT_CLAMP)
        *hidden_layers, last = encoder.mask_downscaling
        hidden = nn.Sequential(*hidden_layers)(mask).flatten(2)  # [B, c_hidden, hw]
        w = last.weight[:, :, 0, 0]  # [C, c_hidden]
        no_mask = encoder.no_mask_embed.weight  # [1, C]
        masked = has_mask[:, None, None]
        dense = torch.where(masked, hidden.transpose(1, 2) @ w.T + last.bias, no_mask[None])
        layer = self.mask_decoder.transformer.layers[0]
        heads = layer.cross_attn_token_to_image.num_heads
        moved = []
        for projected, (linear, _) in zip(first, _first_layer_projections(layer), strict=True):
            per_head = linear.weight.reshape(heads, -1, w.shape[0])  # [h, d, C]
            through = per_head @ w  # [h, d, c_hidden]
            shift = per_head @ (last.bias - no_mask[0])  # [h, d]
            change = through @ hidden[:, None] + shift[..., None]  # [B, h, d, hw]
            moved.append(projected + torch.where(masked[..., None], change, 0.0))
        return dense, tuple(moved)

    # -- the two-way transformer with key masking -----------------------------------------------
    def _two_way(
        self,
        keys: Tensor,
        tokens: Tensor,
        valid: Tensor,
        read: list[int],
        first: tuple[Tensor, Tensor, Tensor],
    ) -> tuple[Tensor, Tensor]:
        """`TwoWayTransformer.forward` of the official module on the image `keys` [B, hw, C],
        keys masked where SAM has none; the first layer's image-side projections come in
        `first`; the output tokens only at the positions `read` (the last attention runs for
        those)."""
        transformer = self.mask_decoder.transformer
        key_pe = self.prompt_encoder.get_dense_pe().flatten(2).permute(0, 2, 1)  # a constant
        queries = tokens
        for i, layer in enumerate(transformer.layers):
            if layer.skip_first_layer_pe:
                queries = _masked_attention(layer.self_attn, queries, queries, queries, valid)
            else:
                q = queries + tokens
                queries = queries + _masked_attention(layer.self_attn, q, q, queries, valid)
            queries = layer.norm1(queries)

            to_image, to_tokens = layer.cross_attn_token_to_image, layer.cross_attn_image_to_token
            if i == 0:
                image_k, image_v, image_q = first
            else:
                image_k = _heads_channels_first(to_image, to_image.k_proj, keys + key_pe)
                image_v = _heads_channels_first(to_image, to_image.v_proj, keys)
                image_q = _heads_channels_first(to_tokens, to_tokens.q_proj, keys + key_pe)
            attn = _token_to_image(to_image, queries + tokens, image_k, image_v)
            queries = layer.norm2(queries + attn)
            queries = layer.norm3(queries + layer.mlp(queries))

            q = queries + tokens
            attn = _image_to_tokens(to_tokens, image_q, q, queries, valid)
            keys = layer.norm4(_unfused_add(keys, attn))

        queries, tokens = queries[:, read], tokens[:, read]
        final = transformer.final_attn_token_to_image
        queries = queries + _attention_through_inputs(final, queries + tokens, keys + key_pe, keys)
        return transformer.norm_final_attn(queries), keys

    # -- the mask decoder ------------------------------------------------------------------------
    def _decode(
        self,
        feat_s0: Tensor,
        feat_s1: Tensor,
        feat_s2: Tensor,
        sparse: Tensor,
        valid: Tensor,
        dense: Tensor,
        first: tuple[Tensor, Tensor, Tensor],
    ) -> tuple[Tensor, Tensor]:
        """`MaskDecoder.predict_masks` for B prompts on one image (the levels channels-last,
        `dense` [B or 1, hw, C]): the 3 multimask candidates and their IoUs (the single-mask
        token's mask is never computed)."""
        md = self.mask_decoder
        b = sparse.shape[0]
        weights = [md.iou_token.weight, md.mask_tokens.weight]
        s = 0
        if md.pred_obj_scores:
            weights.insert(0, md.obj_score_token.weight)
            s = 1
        output_tokens = torch.cat(weights, dim=0)
        n_out = output_tokens.shape[0]
        tokens = torch.cat([output_tokens.unsqueeze(0).expand(b, -1, -1), sparse], dim=1)
        valid = torch.cat([torch.ones(b, n_out, dtype=torch.bool), valid], dim=1)

        _, h, w, c = feat_s2.shape
        # `Sam3Image.predict_inst` adds the "no memory" embedding to the lowest-res level
        image = (feat_s2 + self.no_mem_embed.reshape(1, 1, 1, -1)).flatten(1, 2)
        # read: the IoU token and the multimask tokens (mask token 0 is the single-mask output)
        read = [s, *range(s + 2, s + 1 + md.num_mask_tokens)]
        hs, src = self._two_way(image + dense, tokens, valid, read, first)
        iou_token_out, mask_tokens_out = hs[:, 0, :], hs[:, 1:, :]

        src = src.transpose(1, 2).reshape(b, c, h, w)
        dc1, ln1, act1, dc2, act2 = md.output_upscaling
        # the levels enter channels-last (the layout OpenVINO computes the convolutions in, so
        # that it reorders nothing a click); here they are viewed as the [1, C, h, w] they are
        upscaled = act1(ln1(dc1(src) + feat_s1.permute(0, 3, 1, 2)))
        upscaled = act2(dc2(upscaled) + feat_s0.permute(0, 3, 1, 2))

        hyper_in = torch.stack(
            [
                mlp(mask_tokens_out[:, i - 1, :])
                for i, mlp in enumerate(md.output_hypernetworks_mlps)
                if i > 0  # token 0 is the single-mask output, not exported
            ],
            dim=1,
        )
        _, c2, h2, w2 = upscaled.shape
        # The product in the channels-last layout the upscaling convolutions leave: planar
        # [B, C, hw] cost a full reorder of `upscaled` first (fp32, full size: 6.4 of 80 ms).
        pixels = upscaled.permute(0, 2, 3, 1).reshape(b, h2 * w2, c2)
        masks = (pixels @ hyper_in.transpose(1, 2)).transpose(1, 2).reshape(b, -1, h2, w2)
        iou = md.iou_prediction_head(iou_token_out)[:, 1:]
        return masks, iou

    def forward(
        self,
        pvs_fpn_0: Tensor,
        pvs_fpn_1: Tensor,
        pvs_fpn_2: Tensor,
        pvs_first_keys: Tensor,
        pvs_first_values: Tensor,
        pvs_first_queries: Tensor,
        point_coords: Tensor,
        point_labels: Tensor,
        box: Tensor,
        has_box: Tensor,
        mask_input: Tensor,
        has_mask: Tensor,
    ) -> tuple[Tensor, Tensor]:
        sparse, valid = self._sparse(point_coords, point_labels, box, has_box)
        first = (pvs_first_keys, pvs_first_values, pvs_first_queries)
        dense, first = self._dense(mask_input, has_mask, first)
        return self._decode(pvs_fpn_0, pvs_fpn_1, pvs_fpn_2, sparse, valid, dense, first)


class PvsGridDecoder(PvsDecoder):
    """The automatic mode's head: B point prompts, no box slots, no mask input."""

    def forward(  # type: ignore[override]
        self,
        pvs_fpn_0: Tensor,
        pvs_fpn_1: Tensor,
        pvs_fpn_2: Tensor,
        pvs_first_keys: Tensor,
        pvs_first_values: Tensor,
        pvs_first_queries: Tensor,
        point_coords: Tensor,
        point_labels: Tensor,
    ) -> tuple[Tensor, Tensor]:
        sparse, valid = self._sparse(point_coords, point_labels)
        # One dense embedding for every prompt: the image side of the first attention layer is
        # the one `PvsImageSide` computed, broadcast over the prompts.
        dense = self.prompt_encoder.no_mask_embed.weight[None]
        first = (pvs_first_keys, pvs_first_values, pvs_first_queries)
        return self._decode(pvs_fpn_0, pvs_fpn_1, pvs_fpn_2, sparse, valid, dense, first)


class PvsImageSide(nn.Module):
    """What the interactive head reads of one image, made once with the image's features (the
    unified encoder graph ends with this): the neck's three levels channels-last, and the first
    two-way layer's projections of the image, which no prompt changes but a mask input (the
    decoder adds a mask's share itself, see `PvsDecoder._dense`): the token-to-image keys and
    values and the image-to-token queries, [1, heads, d, hw] each (each head's channels first),
    made with SAM's "no mask" embedding. Three [hw, C] x [C, C/2] products a click fewer and no input reorder; with both,
    a click's graph takes 0.87x (bf16) and 0.82x (fp32) of its time (full size, 2 threads,
    OpenVINO, paired runs; docs/benchmarks.md).

    Inputs: levels 0 and 1 already through the mask decoder's conv_s0 / conv_s1 and level 2 as
    the neck made it, all [1, C, h, w] (as `Sam3Processor.set_image` leaves them).
    """

    def __init__(self, model_or_parts: object) -> None:
        super().__init__()
        tracker = tracker_of(model_or_parts)
        self.prompt_encoder = tracker.sam_prompt_encoder
        self.layer = tracker.sam_mask_decoder.transformer.layers[0]
        self.no_mem_embed = tracker.no_mem_embed
        heads = self.layer.cross_attn_token_to_image.num_heads
        if heads != contract.PVS_HEADS or self.layer.cross_attn_image_to_token.num_heads != heads:
            raise ValueError(
                f"the interactive head has {heads} heads, the contract {contract.PVS_HEADS}"
            )

    def forward(self, level_0: Tensor, level_1: Tensor, level_2: Tensor) -> tuple[Tensor, ...]:
        channels_last = [x.permute(0, 2, 3, 1) for x in (level_0, level_1, level_2)]
        embed = self.no_mem_embed.reshape(1, -1) + self.prompt_encoder.no_mask_embed.weight
        # [1, hw, C] from the channels-last level: OpenVINO 2026.4 (CPU) computed these projections
        # wrong inside the encoder graph from `level_2.flatten(2).transpose(1, 2)` (tiny model:
        # off by the values' whole range; ONNX Runtime and the graph alone were right)
        image = channels_last[2].flatten(1, 2) + embed
        pos = self.prompt_encoder.get_dense_pe().flatten(2).transpose(1, 2)
        attn = self.layer.cross_attn_token_to_image  # both attentions have PVS_HEADS heads
        first = tuple(
            _heads_channels_first(attn, linear, image + pos if with_pos else image)
            for linear, with_pos in _first_layer_projections(self.layer)
        )
        return (*channels_last, *first)


def image_features(model_or_parts: object, levels: list[Tensor]) -> dict[str, object]:
    """`PvsImageSide` as numpy arrays by contract name: what the unified encoder writes for the
    neck's levels [1, C, h, w] (levels 0 and 1 through conv_s0 / conv_s1)."""
    with torch.no_grad():
        out = PvsImageSide(model_or_parts)(*levels)
    return {n: x.contiguous().numpy() for n, x in zip(contract.PVS_FEATURES, out, strict=True)}


# -- shapes and export ---------------------------------------------------------------------------
def pvs_graph_io(
    name: str,
    model_or_parts: object,
    points: int = contract.PVS_POINTS,
    grid_batch: int = PVS_GRID_BATCH,
) -> contract.GraphIO:
    """The contract's signature of one PVS graph for this model (the grid: 1 point slot)."""
    sizes = sizes_of_tracker(model_or_parts)
    return contract.pvs_graph_io(name, sizes, points=points, grid_batch=grid_batch)


def example_inputs(io: contract.GraphIO, image_size: int, seed: int = 0) -> tuple[Tensor, ...]:
    """Plausible inputs: random features, a positive and a negative click, a box, a mask."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for t in io.inputs:
        if t.name in contract.PVS_FEATURES or t.name == contract.PVS_MASK_INPUT:
            out.append(torch.randn(t.shape, generator=gen))
        elif t.name == contract.PVS_POINT_COORDS:
            out.append(torch.rand(t.shape, generator=gen) * image_size)
        elif t.name == contract.PVS_POINT_LABELS:
            labels = torch.full(t.shape, -1.0)
            labels[:, 0] = 1.0
            if t.shape[1] > 1:
                labels[:, 1] = 0.0
            out.append(labels)
        elif t.name == contract.PVS_BOX:
            out.append(torch.tensor([[0.2, 0.3, 0.7, 0.8]]).expand(t.shape) * image_size)
        elif t.name in (contract.PVS_HAS_BOX, contract.PVS_HAS_MASK):
            out.append(torch.ones(t.shape, dtype=torch.bool))
        else:
            raise KeyError(f"no example for {t.name}")
    return tuple(out)


def graph_exports(
    build: object, points: int = contract.PVS_POINTS, grid_batch: int = PVS_GRID_BATCH
) -> list:
    """The two PVS graphs as `sam3_export.graphs.GraphExport`s (for `pipeline.export_all`).

    `build`: a `model.Sam3Build`, a `Sam3Image` with its interactive predictor, the predictor
    or the tracker.
    """
    from . import GraphExport

    tracker = tracker_of(build)
    out = []
    for name, cls in (
        (contract.PVS_DECODER, PvsDecoder),
        (contract.PVS_GRID_DECODER, PvsGridDecoder),
    ):
        io = pvs_graph_io(name, tracker, points, grid_batch)
        args = example_inputs(io, tracker.image_size)
        out.append(GraphExport(name, cls(tracker), args, io.input_names, io.output_names))
    return out


def export_pvs_decoder(
    model_or_parts: object,
    out_dir: str | Path,
    size: str | int | None = None,
    points: int = contract.PVS_POINTS,
    grid_batch: int = PVS_GRID_BATCH,
) -> dict[str, contract.GraphIO]:
    """Write `sam3_pvs_decoder` and `sam3_pvs_decoder_grid` into the model repository `out_dir`
    (`<name>/1/model.onnx`); return their tensor specs.

    Sizes come from the model; `size`, when an int, must equal its image size (a size name such
    as "tiny" is accepted unchecked).
    """
    from ..onnx_io import export_graph

    tracker = tracker_of(model_or_parts)
    if isinstance(size, int) and size != tracker.image_size:
        raise ValueError(f"size {size} != the interactive head's image size {tracker.image_size}")
    specs = {}
    for graph in graph_exports(tracker, points, grid_batch):
        export_graph(graph, out_dir)
        specs[graph.name] = pvs_graph_io(graph.name, tracker, points, grid_batch)
    return specs


def manifest_entries(
    build: object, points: int = contract.PVS_POINTS, grid_batch: int = PVS_GRID_BATCH
) -> dict:
    """What `sam3_manifest.json` records about the PVS graphs."""
    tracker = tracker_of(build)
    return {
        "pvs_points": points,
        "pvs_grid_batch": grid_batch,
        "pvs_grid_points": PVS_GRID_POINTS,
        "pvs_mask_input_size": 4 * (tracker.image_size // tracker.backbone_stride),
    }
