"""The client side of the feature cache: encode an image once, prompt it many times.

The model (`sam3_cached`, napari_sam3.triton_models.cached) holds every image's vision features
keyed by the content of the exact model input; this side sends that key instead of the pixels
once the server has them, resends the pixels transparently on a "miss" (evicted, expired, a
restarted server), and keeps the last grounding answers per (image, prompt, mask_thr) so that a
stricter score_thr, a smaller max_det or another dedup is answered without any request.

A result filtered here is identical to the server's: the postprocess sorts detections by score
(stable) and keeps those >= score_thr, at most max_det, so the answer at a stricter setting is
a prefix of the answer held.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from . import contract
from .masks.rle import decode_masks
from .triton_models.cached import ENCODED, HIT, MISS, image_key
from .triton_models.postprocess import DEFAULT_MASK_THR, DEFAULT_MAX_DET, DEFAULT_SCORE_THR

RESULT_ENTRIES = 32  # grounding answers kept client-side (RLE: small)
SENT_KEYS = 1024  # image keys this client believes the server holds
REFILTERED = "refiltered"  # status of an answer filtered here, with no request at all
STATUSES = (HIT, ENCODED, MISS, REFILTERED)
OPTIONS = (contract.SCORE_THR, contract.MASK_THR, contract.MAX_DET)


@dataclass
class _Answer:
    score_thr: float
    max_det: int
    scores: np.ndarray
    boxes: np.ndarray
    masks: object  # RleMasks
    counts: np.ndarray


class FeatureCacheClient:
    """Requests to `sam3_cached` for one client (thread-safe)."""

    def __init__(self, engine, model_id: str) -> None:
        self.engine = engine
        self.model_id = model_id
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._answers: OrderedDict[tuple, _Answer] = OrderedDict()
        self._lock = threading.Lock()
        self.refiltered = 0
        self.resent = 0
        self._closed = False

    def close(self) -> None:
        """Forget every answer; later requests go to the (closed) engine, which refuses them."""
        with self._lock:
            self._closed = True
            self._answers.clear()
            self._sent.clear()

    # -- keys --------------------------------------------------------------------------------
    def key(self, prepared) -> str:
        """The content key of a PreparedImage (computed once per image and model)."""
        cached = getattr(prepared, "_cache_key", None)
        if cached is not None and cached[0] == self.model_id:
            return cached[1]
        key = image_key(prepared.images_u8, self.model_id)
        prepared._cache_key = (self.model_id, key)
        return key

    def _mark_sent(self, key: str) -> None:
        with self._lock:
            self._sent[key] = None
            self._sent.move_to_end(key)
            while len(self._sent) > SENT_KEYS:
                self._sent.popitem(last=False)

    # -- requests ----------------------------------------------------------------------------
    def request(self, prepared, op: str, inputs: dict, outputs) -> tuple[dict, str]:
        """(outputs, status): status "hit" (features were held) or "encoded"."""
        key = self.key(prepared)
        with self._lock:
            send_pixels = key not in self._sent
        feed = {contract.CACHE_OP: _text(op), contract.IMAGE_ID: _text(key), **inputs}
        wanted = [contract.CACHE_STATUS, *outputs]
        for _ in range(2):
            if send_pixels:
                feed[contract.IMAGES] = prepared.images_u8
            out = self.engine.infer(contract.CACHED, feed, wanted)
            status = _status(out)
            if status != MISS:
                self._mark_sent(key)
                missing = [n for n in outputs if n not in out]
                if missing:
                    raise ValueError(f"{contract.CACHED} answered without {', '.join(missing)}")
                return out, status
            if send_pixels:
                break
            with self._lock:
                self._sent.pop(key, None)
                self.resent += 1
            send_pixels = True
        raise ValueError(
            f"{contract.CACHED} answered '{status}' to a request carrying the image: "
            "a wrong server answer"
        )

    def ground(self, prepared, inputs: dict) -> tuple[dict, str]:
        """Grounding queries (the rows of token_ids) -> the multi-query answer, and its status.

        `inputs` as for `sam3_multi`/`sam3_segment` without the image: token_ids, exemplar
        slots or concept tensors, and the options.
        """
        options = _options(inputs)
        prompt = {k: v for k, v in inputs.items() if k not in (*OPTIONS, contract.IMAGES)}
        answer_key = (self.key(prepared), _digest(prompt), options["mask_thr"])
        with self._lock:
            held = None if self._closed else self._answers.get(answer_key)
            if held is not None and _covers(held, options):
                self._answers.move_to_end(answer_key)
                self.refiltered += 1
                return _refilter(held, options), REFILTERED
        feed = {
            **prompt,
            contract.SCORE_THR: np.array([options["score_thr"]], np.float32),
            contract.MASK_THR: np.array([options["mask_thr"]], np.float32),
            contract.MAX_DET: np.array([options["max_det"]], np.int32),
        }
        out, status = self.request(prepared, "ground", feed, contract.MULTI_OUTPUTS)
        scores = np.asarray(out[contract.SCORES], np.float32).reshape(-1)
        counts = np.asarray(out[contract.KEYWORD_COUNTS]).reshape(-1).astype(np.int64)
        if not self._closed and counts.sum() == len(scores) and (counts >= 0).all():
            # kept only when consistent; the caller validates the answer itself either way
            masks = decode_masks(np.asarray(out[contract.MASKS_RLE], np.uint8).tobytes())
            if len(masks) == len(scores):
                with self._lock:
                    self._answers[answer_key] = _Answer(
                        options["score_thr"],
                        options["max_det"],
                        scores,
                        np.asarray(out[contract.BOXES], np.float32).reshape(-1, 4),
                        masks,
                        counts,
                    )
                    self._answers.move_to_end(answer_key)
                    while len(self._answers) > RESULT_ENTRIES:
                        self._answers.popitem(last=False)
        return out, status

    def concept(self, prepared, inputs: dict) -> tuple[dict, str]:
        out, status = self.request(prepared, "concept", inputs, contract.ENCODED_CONCEPT)
        return {
            name: out[encoded]
            for name, encoded in zip(
                contract.CONCEPT_OUTPUTS, contract.ENCODED_CONCEPT, strict=True
            )
        }, status

    def encode(self, prepared) -> str:
        """Make sure the features of this image are held; "hit" or "encoded"."""
        return self.request(prepared, "encode", {}, ())[1]

    def held(self, prepared) -> bool:
        """Whether the model holds this image's features now (asks; changes nothing)."""
        return bool(self._info(self.key(prepared))["held"])

    def _info(self, key: str | None = None, op: str = "info") -> dict:
        feed = {contract.CACHE_OP: _text(op)}
        if key is not None:
            feed[contract.IMAGE_ID] = _text(key)
        out = self.engine.infer(contract.CACHED, feed, [contract.CACHE_STATUS, contract.CACHE_INFO])
        if contract.CACHE_INFO not in out:
            raise ValueError(f"{contract.CACHED} answered no {contract.CACHE_INFO}")
        raw = np.asarray(out[contract.CACHE_INFO]).reshape(-1)[0]
        return json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))

    def info(self) -> dict:
        info = self._info()
        with self._lock:
            info["results"] = {
                "entries": len(self._answers),
                "max_entries": RESULT_ENTRIES,
                "refiltered": self.refiltered,
            }
            info["resent"] = self.resent
        return info

    def clear(self) -> dict:
        with self._lock:
            self._answers.clear()
            self._sent.clear()
        return self._info(op="clear")


def _text(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def _status(out: dict) -> str:
    if contract.CACHE_STATUS not in out:
        raise ValueError(f"{contract.CACHED} answered no {contract.CACHE_STATUS}")
    raw = np.asarray(out[contract.CACHE_STATUS]).reshape(-1)[0]
    status = raw.decode() if isinstance(raw, bytes) else str(raw)
    if status not in (HIT, ENCODED, MISS):
        raise ValueError(f"{contract.CACHED} answered an unknown cache status {status[:40]!r}")
    return status


def _options(inputs: dict) -> dict:
    def scalar(name, default, kind):
        if name not in inputs:
            return default
        return kind(np.asarray(inputs[name]).reshape(-1)[0])

    return {
        "score_thr": scalar(contract.SCORE_THR, DEFAULT_SCORE_THR, float),
        "mask_thr": scalar(contract.MASK_THR, DEFAULT_MASK_THR, float),
        "max_det": scalar(contract.MAX_DET, DEFAULT_MAX_DET, int),
    }


def _digest(prompt: dict) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for name in sorted(prompt):
        value = np.ascontiguousarray(prompt[name])
        digest.update(f"{name}{value.dtype.str}{value.shape}".encode())
        digest.update(memoryview(value).cast("B"))
    return digest.hexdigest()


def _covers(held: _Answer, options: dict) -> bool:
    if options["score_thr"] < held.score_thr:
        return False
    # a query cut at max_det may hold more above score_thr than the answer shows
    return options["max_det"] <= held.max_det or bool((held.counts < held.max_det).all())


def _refilter(held: _Answer, options: dict) -> dict:
    keep, counts, start = [], [], 0
    for count in held.counts.tolist():
        scores = held.scores[start : start + count]
        kept = np.flatnonzero(scores >= np.float32(options["score_thr"]))[: options["max_det"]]
        keep.append(start + kept)
        counts.append(len(kept))
        start += count
    index = np.concatenate(keep).astype(np.int64) if keep else np.zeros(0, np.int64)
    return {
        contract.SCORES: held.scores[index],
        contract.BOXES: held.boxes[index],
        contract.MASKS_RLE: np.frombuffer(held.masks.take(index).to_bytes(), np.uint8),
        contract.KEYWORD_COUNTS: np.asarray(counts, np.int32),
    }
