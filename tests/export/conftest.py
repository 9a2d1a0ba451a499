"""Fixtures for the export tests: the tiny model exported once, ONNX Runtime sessions on it, and
the official eager torch path on the same random weights as the reference."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from .._required import require_export

# Every test here runs the export tool: without it the collection fails, naming what is missing.
require_export()

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

from napari_sam3.core import contract  # noqa: E402

SEED = 0


def pytest_collection_modifyitems(items):
    """Every test in this folder needs the export tool: marked `needs_export`."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.needs_export)


class OrtRepo:
    """ONNX Runtime sessions over an exported model repository (2 threads, CPU)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.manifest = contract.load_manifest(root)
        self.image_size = self.manifest.image_size
        self.slots = self.manifest.exemplar_slots
        self._sessions: dict[str, ort.InferenceSession] = {}

    def session(self, name: str) -> ort.InferenceSession:
        if name not in self._sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            options.inter_op_num_threads = 1
            self._sessions[name] = ort.InferenceSession(
                str(contract.graph_path(self.root, name)),
                options,
                providers=["CPUExecutionProvider"],
            )
        return self._sessions[name]

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        sess = self.session(name)
        wanted = {i.name for i in sess.get_inputs()}
        outputs = sess.run(None, {k: v for k, v in feeds.items() if k in wanted})
        return dict(zip([o.name for o in sess.get_outputs()], outputs, strict=True))

    def encode(self, images_u8: np.ndarray) -> dict[str, np.ndarray]:
        return self.run(contract.ENCODER, {contract.IMAGES: images_u8})

    def text(self, token_ids: np.ndarray) -> dict[str, np.ndarray]:
        return self.run(contract.TEXT, {contract.TOKEN_IDS: token_ids})

    def slot_arrays(self, boxes: Sequence, labels: Sequence[int]) -> dict[str, np.ndarray]:
        """Exemplar slots: the first len(boxes) valid, the rest zero."""
        k = self.slots
        out = {
            contract.EXEMPLAR_BOXES: np.zeros((1, k, 4), np.float32),
            contract.EXEMPLAR_LABELS: np.zeros((1, k), np.int64),
            contract.EXEMPLAR_VALID: np.zeros((1, k), np.bool_),
        }
        n = len(boxes)
        if n:
            out[contract.EXEMPLAR_BOXES][0, :n] = np.asarray(boxes, np.float32)
            out[contract.EXEMPLAR_LABELS][0, :n] = np.asarray(labels, np.int64)
            out[contract.EXEMPLAR_VALID][0, :n] = True
        return out


class Eager:
    """The official SAM3 code, eager, on the same random weights (the parity reference)."""

    def __init__(self, build) -> None:
        self.build = build
        self.model = build.model
        self.image_size = build.dims.sizes.image_size
        self.tokenizer = self.model.backbone.language_backbone.tokenizer
        self.find = SimpleNamespace(
            img_ids=torch.zeros(1, dtype=torch.int64), text_ids=torch.zeros(1, dtype=torch.int64)
        )

    def tokens(self, text: str) -> np.ndarray:
        return self.tokenizer([text], context_length=contract.TEXT_TOKENS).numpy()

    def _context(self):
        from sam3_export.patches import no_pin_memory

        return _Both(torch.no_grad(), no_pin_memory())

    def backbone(self, images_u8: np.ndarray, text: str) -> dict:
        """`backbone_out` as `Sam3Processor` builds it: image features plus one text prompt."""
        x = (torch.from_numpy(images_u8).to(torch.float32) / 255.0 - 0.5) / 0.5
        with self._context():
            out = self.model.backbone.forward_image(x)
            out.update(self.model.backbone.forward_text([text], device="cpu"))
        return out

    def prompt(self, boxes: Sequence, labels: Sequence[int]):
        """The official Prompt: boxes normalised cxcywh, no padding (0 boxes = dummy prompt)."""
        from sam3.model.geometry_encoders import Prompt

        if len(boxes) == 0:
            return self.model._get_dummy_prompt()
        xyxy = torch.tensor(np.asarray(boxes, np.float64)) / self.image_size
        cxcywh = torch.stack(
            [
                (xyxy[:, 0] + xyxy[:, 2]) / 2,
                (xyxy[:, 1] + xyxy[:, 3]) / 2,
                xyxy[:, 2] - xyxy[:, 0],
                xyxy[:, 3] - xyxy[:, 1],
            ],
            dim=-1,
        ).to(torch.float32)
        n = len(boxes)
        return Prompt(
            box_embeddings=cxcywh[:, None],
            box_mask=torch.zeros(1, n, dtype=torch.bool),
            box_labels=torch.tensor(list(labels), dtype=torch.int64)[:, None],
        )

    def ground(self, backbone_out: dict, boxes: Sequence = (), labels: Sequence[int] = ()):
        with self._context():
            return self.model.forward_grounding(
                backbone_out=backbone_out,
                find_input=self.find,
                find_target=None,
                geometric_prompt=self.prompt(boxes, labels),
            )

    def geometry(self, backbone_out: dict, boxes: Sequence, labels: Sequence[int]):
        """The geometry encoder's output (the concept) on this image, seq-first."""
        with self._context():
            _, feats, pos, sizes = self.model._get_img_feats(backbone_out, self.find.img_ids)
            return self.model.geometry_encoder(
                geo_prompt=self.prompt(boxes, labels),
                img_feats=feats,
                img_sizes=sizes,
                img_pos_embeds=pos,
            )

    def ground_with_geometry(self, backbone_out: dict, geometry) -> dict:
        """`forward_grounding` with the geometry encoder's output replaced by `geometry`."""
        encoder = self.model.geometry_encoder
        encoder.forward = lambda *args, **kwargs: geometry
        try:
            return self.ground(backbone_out)
        finally:
            del encoder.forward


class _Both:
    def __init__(self, *contexts) -> None:
        self.contexts = contexts

    def __enter__(self):
        for c in self.contexts:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.contexts):
            c.__exit__(*exc)


def random_image(seed: int, size: int) -> np.ndarray:
    """A smooth-ish random uint8 RGB image [1,3,S,S] (blocks plus noise)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (1, 3, size // 14 + 1, size // 14 + 1))
    image = np.repeat(np.repeat(coarse, 14, axis=2), 14, axis=3)[..., :size, :size]
    noise = rng.integers(-20, 21, image.shape)
    return np.clip(image + noise, 0, 255).astype(np.uint8)


@pytest.fixture(scope="session")
def tiny_repo(tiny_repository) -> Path:
    """The tiny model (random weights, seed 0), exported once for the whole session
    (tests/conftest.py; the repository files around the graphs do not touch them)."""
    assert contract.load_manifest(tiny_repository).seed == SEED
    return tiny_repository


@pytest.fixture(scope="session")
def ort_repo(tiny_repo) -> OrtRepo:
    return OrtRepo(tiny_repo)


@pytest.fixture(scope="session")
def eager() -> Eager:
    """A separate build of the same weights: nothing the export did can leak into it."""
    from sam3_export.model import build_sam3

    return Eager(build_sam3("tiny", seed=SEED))


@pytest.fixture(scope="session")
def images(eager) -> SimpleNamespace:
    s = eager.image_size
    return SimpleNamespace(a=random_image(1, s), b=random_image(2, s))


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory) -> Path:
    """Seed-0 random weights of the tiny model (those of `tiny_repository`), saved in the
    official sam3.pt layout."""
    from sam3_export.model import build_sam3, save_checkpoint

    path = tmp_path_factory.mktemp("ckpt") / "sam3_tiny.pt"
    save_checkpoint(build_sam3("tiny", seed=SEED).model, path)
    return path


@pytest.fixture(scope="session")
def cli_export(checkpoint, tmp_path_factory) -> SimpleNamespace:
    """`sam3-export --checkpoint` run once as an analyst runs it (its own process, an empty
    HOME, no CI markers), watched for network use (tests/_network_watch.py). One export serves
    the checkpoint test and the offline test: each tiny export costs tens of seconds."""
    import sys

    from .._network_watch import run_watched, watched_environment

    where = tmp_path_factory.mktemp("cli_export")
    env, home, log = watched_environment(where)
    export = Path(sys.executable).with_name("sam3-export")
    command = [str(export), "--checkpoint", str(checkpoint), "--size", "tiny", "--out", "repo",
               "--flavor", "python", "--device", "cpu", "-q"]  # fmt: skip
    done, trace = run_watched(command, env, where)
    return SimpleNamespace(
        done=done, trace=trace, home=home, log=log, out=where / "repo", checkpoint=checkpoint
    )
