"""A server's answer is checked against what the request can produce before anything is allocated.

On the code before: an RLE payload claiming one 2^30 x 2^30 mask was accepted (lazily) and
failed with MemoryError when the mask was used; counts beyond max_det were accepted.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib

import numpy as np
import pytest

from napari_sam3.core import contract
from napari_sam3.masks.rle import HEADER_SIZE, MAGIC, decode_masks, encode_masks


def _payload(n: int, h: int, w: int, runs_per_mask: list[list[int]]) -> bytes:
    """A well-formed payload (valid checksum) for whatever N, H, W it claims."""
    values = [len(r) for r in runs_per_mask] + [v for r in runs_per_mask for v in r]
    body = bytearray()
    for v in values:  # LEB128
        while True:
            byte = v & 0x7F
            v >>= 7
            body.append(byte | (0x80 if v else 0))
            if not v:
                break
    head = struct.pack("<4sBBHIII", MAGIC, 1, 0, 0, n, h, w)
    crc = zlib.crc32(bytes(body), zlib.crc32(head))
    payload = head + struct.pack("<IQ", crc, len(body)) + bytes(body)
    assert len(payload) == HEADER_SIZE + len(body)
    return payload


class ForgingEngine:
    """The real embedded engine, with the server's mask payload replaced on the way back."""

    def __init__(self, engine, forge) -> None:
        self.engine, self.forge = engine, forge

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def infer(self, model, inputs, outputs=None):
        out = dict(self.engine.infer(model, inputs, outputs))
        return self.forge(model, out)


@pytest.fixture
def forged_client(local_client):
    """`local_client` whose answers a test may forge (restored afterwards)."""
    real = local_client.engine
    # The feature cache's client sends the grounding requests: it talks to the same engine.
    holders = [local_client, *[h for h in (getattr(local_client, "_features", None),) if h]]

    def use(forge):
        for holder in holders:
            holder.engine = ForgingEngine(real, forge)
        return local_client

    yield use
    for holder in holders:
        holder.engine = real


def test_a_huge_claimed_mask_is_refused_from_the_header():
    side = 2**30
    huge = _payload(1, side, side, [[0, side * side]])  # one all-True mask of 2^60 pixels
    assert len(huge) < 64
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"claims masks of 1073741824x1073741824.*72x72"):
            decode_masks(huge, shape=(72, 72), max_count=10)
        with pytest.raises(ValueError, match="claims 3 masks.*at most 2"):
            decode_masks(encode_masks(np.zeros((3, 4, 4), bool)), shape=(4, 4), max_count=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    # What the request can produce is accepted.
    assert len(decode_masks(encode_masks(np.ones((2, 4, 4), bool)), (4, 4), 2)) == 2


def test_segment_refuses_a_wrong_frame_or_too_many_detections(forged_client):
    s = None

    def wrong_frame(model, out):
        if contract.SCORES not in out:
            return out
        side = 2**30
        out[contract.MASKS_RLE] = np.frombuffer(
            _payload(len(out[contract.SCORES]), side, side,
                     [[0, side * side]] * len(out[contract.SCORES])), np.uint8)  # fmt: skip
        return out

    client = forged_client(wrong_frame)
    s = client.image_size
    image = np.random.default_rng(1).integers(0, 256, (64, 64, 3), np.uint8)
    with pytest.raises(ValueError, match=f"claims masks of 1073741824x1073741824.*{s}x{s}"):
        client.segment(image, "building", score_thr=0.0, max_det=3)

    def too_many(model, out):
        if contract.SCORES not in out:
            return out
        n = 7
        out[contract.SCORES] = np.full(n, 0.5, np.float32)
        out[contract.BOXES] = np.tile(np.array([[0, 0, 4, 4]], np.float32), (n, 1))
        out[contract.MASKS_RLE] = np.frombuffer(encode_masks(np.zeros((n, s, s), bool)), np.uint8)
        return out

    client = forged_client(too_many)
    # Another image: the feature cache's client may hold the answer to the one above.
    image = np.random.default_rng(5).integers(0, 256, (64, 64, 3), np.uint8)
    with pytest.raises(ValueError, match="answered 7 detections.*at most 3"):
        client.segment(image, "building", score_thr=0.0, max_det=3)
    # Without max_det, the decoder's queries are the bound (7 fit the tiny model's queries).
    assert len(client.segment(image, "building", score_thr=0.0, dedup=None)) == 7


def test_multi_refuses_counts_beyond_the_request(forged_client):
    def inflated(model, out):
        if contract.KEYWORD_COUNTS not in out:
            return out
        counts = np.asarray(out[contract.KEYWORD_COUNTS]).copy()
        counts[0] = 10**6
        out[contract.KEYWORD_COUNTS] = counts
        return out

    client = forged_client(inflated)
    image = np.random.default_rng(2).integers(0, 256, (64, 64, 3), np.uint8)
    with pytest.raises(ValueError, match="keyword counts .*1000000.*at most 2"):
        client.multi(image, ["building", "road"], score_thr=0.0, max_det=2)


def test_interactive_refuses_a_mask_of_another_size(forged_client, monkeypatch):
    def wrong(model, out):
        if contract.MASKS_RLE in out:
            out[contract.MASKS_RLE] = np.frombuffer(
                encode_masks(np.zeros((3, 8, 8), bool)), np.uint8
            )
        return out

    client = forged_client(wrong)
    # the forged answers stand for a server's: a session asks a server for the masks it makes
    # (in process it makes them itself from the logits)
    monkeypatch.setattr(client._features, "remote", True)
    session = client.interactive(np.zeros((64, 64, 3), np.uint8))
    s = client.image_size
    with pytest.raises(ValueError, match=f"claims masks of 8x8.*{s}x{s}"):
        session.add_point((10, 10))
