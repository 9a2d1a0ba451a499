"""Export-time patches: value-preserving, and gone once the export is over."""

from __future__ import annotations

import torch


def test_patches_preserve_values_and_are_undone(eager):
    from sam3.model import vitdet
    from sam3.model.decoder import TransformerDecoder
    from sam3.model.geometry_encoders import SequenceGeometryEncoder

    from sam3_export.patches import export_patches, no_pin_memory

    model = eager.model
    originals = (
        vitdet.Attention._apply_rope,
        TransformerDecoder._get_rpb_matrix,
        SequenceGeometryEncoder._encode_points,
    )
    x = (
        torch.rand(
            1, 3, eager.image_size, eager.image_size, generator=torch.Generator().manual_seed(0)
        )
        - 0.5
    ) / 0.5
    with torch.no_grad(), no_pin_memory():
        plain = model.backbone.forward_image(x)["backbone_fpn"]
        with export_patches(model):
            attn = model.backbone.vision_backbone.trunk.blocks[0].attn
            assert not attn.freqs_cis.is_complex()
            patched = model.backbone.forward_image(x)["backbone_fpn"]
    for a, b in zip(plain, patched, strict=True):
        assert float((a - b).abs().max()) <= 1e-5
    assert attn.freqs_cis.is_complex()
    assert "pin_memory" not in vars(torch.Tensor)
    assert originals == (
        vitdet.Attention._apply_rope,
        TransformerDecoder._get_rpb_matrix,
        SequenceGeometryEncoder._encode_points,
    )
