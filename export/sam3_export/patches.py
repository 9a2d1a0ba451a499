"""Export-time monkeypatches: each small, named, value-preserving, with a one-line reason.

They are applied only inside `export_patches(model)` (a context manager) and undone on exit;
the installed `sam3` package is never edited. `no_pin_memory` is also what lets the official
eager code run on a machine without an accelerator (tests use it for the torch reference).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from sam3.model import vitdet
from sam3.model.decoder import TransformerDecoder
from sam3.model.geometry_encoders import SequenceGeometryEncoder


@contextlib.contextmanager
def _swap_attr(owner: object, name: str, value: object) -> Iterator[None]:
    own = name in vars(owner)
    original = vars(owner)[name] if own else None
    setattr(owner, name, value)
    try:
        yield
    finally:
        if own:
            setattr(owner, name, original)
        else:  # it was inherited: uncover the inherited one again
            delattr(owner, name)


# -- real_rope ----------------------------------------------------------------------------
# Reason: the ViT's RoPE multiplies complex tensors (view_as_complex); ONNX has no complex type.


def _apply_rope_real(self: vitdet.Attention, q: torch.Tensor, k: torch.Tensor):
    if not self.use_rope:
        return q, k
    cos, sin = self.freqs_cis[..., 0], self.freqs_cis[..., 1]  # [L, head_dim / 2]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        pairs = x.float().reshape(*x.shape[:-1], -1, 2)
        re, im = pairs[..., 0], pairs[..., 1]
        out = torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1)
        return out.flatten(-2).type_as(x)

    return rotate(q), rotate(k)


@contextlib.contextmanager
def real_rope(model: torch.nn.Module) -> Iterator[None]:
    """Rotate with real cos/sin pairs; the complex `freqs_cis` buffers are swapped meanwhile."""
    swapped = []
    for module in model.modules():
        if isinstance(module, vitdet.Attention) and module.use_rope:
            cis = module._buffers["freqs_cis"]
            module._buffers["freqs_cis"] = torch.stack((cis.real, cis.imag), dim=-1).contiguous()
            swapped.append((module, cis))
    try:
        with _swap_attr(vitdet.Attention, "_apply_rope", _apply_rope_real):
            yield
    finally:
        for module, cis in swapped:
            module._buffers["freqs_cis"] = cis


# -- no_pin_memory --------------------------------------------------------------------------
# Reason: the geometry encoder pins a 4-float tensor; fails without an accelerator, NYI in export.


@contextlib.contextmanager
def no_pin_memory() -> Iterator[None]:
    with _swap_attr(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self):
        yield


# -- static_box_rpb ---------------------------------------------------------------------------
# Reason: the decoder checks its coordinate cache against tensor-valued H, W (a data-dependent
# guard); the feature size is static, so the cached python-int size is passed instead.

_original_get_rpb_matrix = TransformerDecoder._get_rpb_matrix


def _get_rpb_matrix_static(self: TransformerDecoder, reference_boxes, feat_size):
    if self.compilable_stored_size is None:
        raise RuntimeError("the decoder's coordinate cache is not warmed (see model._warm_caches)")
    return _original_get_rpb_matrix(self, reference_boxes, self.compilable_stored_size)


@contextlib.contextmanager
def static_box_rpb() -> Iterator[None]:
    with _swap_attr(TransformerDecoder, "_get_rpb_matrix", _get_rpb_matrix_static):
        yield


# -- skip_empty_points ------------------------------------------------------------------------
# Reason: with zero points the point branch (grid_sample, linear on empty tensors) exports
# into a graph ONNX Runtime rejects; its output is an empty sequence either way.

_original_encode_points = SequenceGeometryEncoder._encode_points


def _encode_points_skip_empty(self, points, points_mask, points_labels, img_feats):
    if points.shape[0] == 0:
        bs = points.shape[1]
        empty = torch.zeros(0, bs, self.d_model, dtype=img_feats.dtype, device=img_feats.device)
        return empty, points_mask
    return _original_encode_points(self, points, points_mask, points_labels, img_feats)


@contextlib.contextmanager
def skip_empty_points() -> Iterator[None]:
    with _swap_attr(SequenceGeometryEncoder, "_encode_points", _encode_points_skip_empty):
        yield


@contextlib.contextmanager
def export_patches(model: torch.nn.Module) -> Iterator[None]:
    """Every export-time patch at once."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(real_rope(model))
        stack.enter_context(no_pin_memory())
        stack.enter_context(static_box_rpb())
        stack.enter_context(skip_empty_points())
        yield
