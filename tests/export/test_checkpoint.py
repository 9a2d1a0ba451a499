"""Checkpoints: the official format round-trips; bad checkpoints are clear errors, never random."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from napari_sam3.core import contract

from .._network_watch import assert_offline


def _state(path):
    state = torch.load(path, map_location="cpu", weights_only=True)
    return state["model"] if "model" in state else state


def test_official_layout(checkpoint):
    keys = list(_state(checkpoint))
    assert all(k.startswith(("detector.", "tracker.")) for k in keys)
    assert any(k.startswith("detector.backbone.vision_backbone.trunk.") for k in keys)
    assert any(k.startswith("detector.backbone.language_backbone.") for k in keys)
    assert any(k.startswith("tracker.sam_mask_decoder.") for k in keys)


def test_round_trip_is_identical(checkpoint, eager, images):
    from sam3_export.model import build_sam3, model_id

    loaded = build_sam3("tiny", checkpoint=checkpoint)
    assert not loaded.random_weights and loaded.checkpoint_name == checkpoint.name
    assert model_id(loaded.model) == model_id(eager.model)
    mine = eager.model.state_dict()
    for key, value in loaded.model.state_dict().items():
        assert torch.equal(value, mine[key]), key
    # and the same outputs, bit for bit, through the official eager code
    other = type(eager)(loaded)
    boxes, labels = [[20.0, 30.0, 70.0, 90.0]], [1]
    a = eager.ground(eager.backbone(images.a, "car"), boxes, labels)
    b = other.ground(other.backbone(images.a, "car"), boxes, labels)
    for key in ("pred_logits", "pred_boxes_xyxy", "pred_masks", "presence_logit_dec"):
        assert torch.equal(a[key], b[key]), key


def test_missing_checkpoint(tmp_path):
    from sam3_export.model import CheckpointError, build_sam3

    with pytest.raises(CheckpointError, match="not found"):
        build_sam3("tiny", checkpoint=tmp_path / "nope.pt")


def test_not_a_checkpoint(tmp_path):
    from sam3_export.model import CheckpointError, build_sam3

    junk = tmp_path / "junk.pt"
    junk.write_text("this is not a torch checkpoint\n")
    with pytest.raises(CheckpointError, match="not a readable torch checkpoint"):
        build_sam3("tiny", checkpoint=junk)
    listing = tmp_path / "list.pt"
    torch.save([1, 2, 3], listing)
    with pytest.raises(CheckpointError, match="not a state dict"):
        build_sam3("tiny", checkpoint=listing)
    other = tmp_path / "other.pt"
    torch.save({"encoder.weight": torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match="not a SAM3 checkpoint"):
        build_sam3("tiny", checkpoint=other)


def test_missing_keys_are_listed(tmp_path, checkpoint):
    from sam3_export.model import CheckpointError, build_sam3

    state = _state(checkpoint)
    dropped = [
        "detector.transformer.decoder.presence_token.weight",
        "detector.geometry_encoder.label_embed.weight",
        "tracker.sam_mask_decoder.conv_s0.weight",
    ]
    for key in dropped:
        del state[key]
    path = tmp_path / "partial.pt"
    torch.save({"model": state}, path)
    with pytest.raises(CheckpointError) as info:
        build_sam3("tiny", checkpoint=path)
    message = str(info.value)
    assert "lacks 3 of the model's" in message
    for key in dropped:
        assert key.split(".", 1)[1] in message


def test_wrong_size_is_refused(tmp_path, checkpoint):
    from sam3_export.model import CheckpointError, build_sam3

    state = _state(checkpoint)
    key = "detector.transformer.decoder.query_embed.weight"
    state[key] = torch.zeros(3, 7)
    path = tmp_path / "resized.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="wrong shape"):
        build_sam3("tiny", checkpoint=path)


def test_cli_refuses_and_writes_nothing(tmp_path, capsys):
    from sam3_export.cli import main

    out = tmp_path / "repo"
    assert (
        main(["--checkpoint", str(tmp_path / "missing.pt"), "--size", "tiny", "--out", str(out)])
        == 2
    )
    assert "checkpoint not found" in capsys.readouterr().err
    assert not (out / contract.MANIFEST_FILE).exists()
    with pytest.raises(SystemExit):
        main(["--checkpoint", "x.pt", "--random-weights", "--out", str(out)])
    with pytest.raises(SystemExit):
        main(["--out", str(out)])


def test_cli_exports_a_checkpoint(cli_export, ort_repo, eager, images):
    """sam3-export --checkpoint: same weights as the random-weight export, same graphs' outputs."""
    assert cli_export.done.returncode == 0, cli_export.done.stderr[-3000:]
    manifest = contract.load_manifest(cli_export.out)
    assert manifest.random_weights is False and manifest.seed is None
    assert manifest.checkpoint == cli_export.checkpoint.name
    assert manifest.model_id == ort_repo.manifest.model_id
    results = []
    for repo in (ort_repo, type(ort_repo)(cli_export.out)):
        vision = repo.encode(images.a)
        text = repo.text(eager.tokens("car"))
        slots = repo.slot_arrays([[20.0, 30.0, 70.0, 90.0]], [0])
        results.append(repo.run(contract.DECODER, {**vision, **text, **slots}))
    for name in contract.DECODER_OUTPUTS:
        np.testing.assert_array_equal(results[0][name], results[1][name])


def test_sam3_export_stays_offline(cli_export):
    """The same run, watched: no socket but loopback, nothing written under HOME."""
    assert_offline(cli_export.done, cli_export.trace, cli_export.home, cli_export.log)
    assert (cli_export.out / contract.MANIFEST_FILE).is_file()


def test_legacy_serialization_loads(tmp_path, checkpoint, eager):
    """Checkpoints written without the zip format (no mmap possible) load too."""
    from sam3_export.model import build_sam3, model_id

    path = tmp_path / "legacy.pt"
    torch.save(_state(checkpoint), path, _use_new_zipfile_serialization=False)
    assert model_id(build_sam3("tiny", checkpoint=path).model) == model_id(eager.model)
