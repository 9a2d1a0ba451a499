"""Checkpoint layouts: release, DDP `module.`, plain image-model state dict, .safetensors all load
to the same weights; a checkpoint without interactive weights exports the grounding graphs only."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from napari_sam3.core import contract


@pytest.fixture(scope="module")
def release_state(eager) -> dict[str, torch.Tensor]:
    """The seed-0 tiny weights in the release layout (`detector.*` / `tracker.*`)."""
    from sam3_export.model import split_state_dict

    return {k: v.clone().contiguous() for k, v in split_state_dict(eager.model).items()}


def _plain(eager) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in eager.model.state_dict().items()}


def _grounding_only(eager) -> dict[str, torch.Tensor]:
    from sam3_export.model import INTERACTIVE_KEYS

    return {k: v for k, v in _plain(eager).items() if not k.startswith(INTERACTIVE_KEYS)}


def test_four_layouts_one_model_id(tmp_path, release_state, eager):
    from safetensors.torch import save_file

    from sam3_export.model import build_sam3, model_id

    paths = {
        "release": tmp_path / "sam3.pt",
        "ddp": tmp_path / "ddp.pt",
        "plain": tmp_path / "plain.pt",
        "safetensors": tmp_path / "sam3.safetensors",
    }
    torch.save({"model": release_state}, paths["release"])
    torch.save({"model": {"module." + k: v for k, v in release_state.items()}}, paths["ddp"])
    torch.save({"state_dict": _plain(eager)}, paths["plain"])
    save_file(release_state, paths["safetensors"])
    expected = model_id(eager.model)
    for layout, path in paths.items():
        build = build_sam3("tiny", checkpoint=path)
        assert build.has_interactive, layout
        assert model_id(build.model) == expected, layout


def test_distinct_weights_give_distinct_ids(tmp_path, release_state, eager):
    """The id follows the tensors, not the file: one changed weight changes it."""
    from sam3_export.model import build_sam3, model_id

    changed = dict(release_state)
    key = "detector.transformer.decoder.query_embed.weight"
    changed[key] = changed[key] + 1.0
    path = tmp_path / "changed.pt"
    torch.save(changed, path)
    assert model_id(build_sam3("tiny", checkpoint=path).model) != model_id(eager.model)


def test_half_the_weights_are_refused(tmp_path, release_state):
    from sam3_export.model import CheckpointError, build_sam3

    keys = sorted(k for k in release_state if k.startswith("detector."))
    half = {k: v for i, (k, v) in enumerate(sorted(release_state.items())) if i % 2 == 0}
    dropped = [k for k in keys if k not in half]
    path = tmp_path / "half.safetensors"
    from safetensors.torch import save_file

    save_file(half, path)
    with pytest.raises(CheckpointError) as info:
        build_sam3("tiny", checkpoint=path)
    message = str(info.value)
    assert "lacks" in message and str(path) in message
    for key in dropped[:20]:
        if key.endswith(("freqs_cis", "relative_coords")):
            continue
        assert key.split(".", 1)[1] in message


def test_partial_interactive_weights_are_refused(tmp_path, release_state):
    """Some tracker weights but not all: an error, never a half-random interactive head."""
    from sam3_export.model import CheckpointError, build_sam3

    state = dict(release_state)
    del state["tracker.sam_mask_decoder.conv_s0.weight"]
    path = tmp_path / "partial_tracker.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="lacks 1 of"):
        build_sam3("tiny", checkpoint=path)


def test_corrupt_safetensors_named(tmp_path):
    from sam3_export.model import CheckpointError, build_sam3

    path = tmp_path / "broken.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(CheckpointError, match="broken.safetensors is not a readable"):
        build_sam3("tiny", checkpoint=path)


@pytest.mark.timeout(1500)  # the first export test of a session also pays the shared export
def test_grounding_only_checkpoint(tmp_path, eager, ort_repo, images, capsys):
    """No interactive weights: grounding graphs only, said by the CLI and the manifest; the
    grounding outputs equal the full export's; the client refuses clicks with that message."""
    from napari_sam3.client.sam3 import Sam3Client
    from sam3_export.cli import main
    from sam3_export.model import build_sam3, model_id

    path = tmp_path / "finetuned.pt"
    torch.save({"model": _grounding_only(eager)}, path)
    build = build_sam3("tiny", checkpoint=path)
    assert not build.has_interactive
    assert model_id(build.model, interactive=False) == model_id(eager.model, interactive=False)

    out = tmp_path / "repo"
    args = ["--checkpoint", str(path), "--size", "tiny", "--out", str(out), "-q"]
    assert main([*args, "--flavor", "python", "--device", "cpu"]) == 0
    printed = capsys.readouterr().out
    assert "no interactive (tracker.*) weights" in printed
    manifest = contract.load_manifest(out)
    assert manifest.data[contract.INTERACTIVE_HEAD] is False
    assert not manifest.interactive_head
    assert manifest.pvs_points is None
    assert not contract.graph_path(out, contract.PVS_DECODER).exists()
    assert not (out / contract.PVS_DECODER).exists()

    # the grounding graph gives the full export's outputs
    results = []
    for repo in (ort_repo, type(ort_repo)(out)):
        vision = repo.encode(images.a)
        text = repo.text(eager.tokens("car"))
        slots = repo.slot_arrays([[20.0, 30.0, 70.0, 90.0]], [1])
        results.append(repo.run(contract.DECODER, {**vision, **text, **slots}))
    for name in contract.DECODER_OUTPUTS:
        np.testing.assert_array_equal(results[0][name], results[1][name])

    image = np.ascontiguousarray(images.a[0].transpose(1, 2, 0)[:40, :50])
    frames = []
    for repo in (out, ort_repo.root):
        with Sam3Client.local(repo, threads=1, runtime="onnxruntime", precision="fp32") as client:
            if repo == out:
                with pytest.raises(ValueError, match="no interactive head.*finetuned.pt"):
                    client.interactive(image)
            frames.append(client.segment(image, "car", score_thr=0.0))
    assert len(frames[1]) > 0
    columns = ["score", "keyword", "prompt_kind"]
    pd.testing.assert_frame_equal(frames[0][columns], frames[1][columns])
    np.testing.assert_array_equal(np.stack(frames[0]["box"]), np.stack(frames[1]["box"]))
    for a, b in zip(frames[0]["mask"], frames[1]["mask"], strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
