"""The client side of the feature cache: encode an image once, prompt it many times.

The model (`sam3_cached`, napari_sam3.runtime.cached) holds every image's vision features
keyed by the content of the exact model input; this side sends that key instead of the pixels
once the server has them, resends the pixels transparently on a "miss" (evicted, expired, a
restarted server), and keeps the last grounding answers per (image, prompt, mask_thr) so that a
stricter score_thr, a smaller max_det or another dedup is answered without any request.

A result filtered here is identical to the server's: the postprocess sorts detections by score
(stable) and keeps those >= score_thr, at most max_det, so the answer at a stricter setting is
a prefix of the answer held.

Everything held here belongs to one model (an image's key hashes the model id too). Every answer
of `sam3_cached` names the model that gave it (`cache_model_id`; a repository written before
that output says it in its `info` JSON, asked after a refusal), and before answering from
its memo a client of a remote server asks `info` (no model runs). When the server was restarted
on another repository, the client drops what it held for the old model, re-reads the manifest
(through `on_change`), warns once, and the request in flight raises `ModelSwitched`, which
`Sam3Client` answers by running the call again on the new model; what cannot be run again (a
concept, a session, a handle's last result made with the old model) raises `ModelChanged`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from napari_sam3.core import contract, validate
from napari_sam3.core.errors import BadData, Sam3Error
from napari_sam3.masks.rle import RlePayload, as_rle_masks
from napari_sam3.runtime.cached import ENCODED, HIT, MISS, image_key
from napari_sam3.runtime.postprocess import DEFAULT_MASK_THR, DEFAULT_MAX_DET, DEFAULT_SCORE_THR

RESULT_ENTRIES = 32  # grounding answers kept client-side
# ... and their bytes: a trained model's answer is kilobytes, but fragmented masks (noise-like
# output of random weights, fields, clouds) take ~3 MB of runs each at 1008 px
RESULT_BYTES = 2**30
SENT_KEYS = 1024  # image keys this client believes the server holds
REFILTERED = "refiltered"  # status of an answer filtered here, with no request at all
STATUSES = (HIT, ENCODED, MISS, REFILTERED)
OPTIONS = (contract.SCORE_THR, contract.MASK_THR, contract.MAX_DET)


class ModelChanged(Sam3Error, ValueError):
    """The server now serves another model than the one something was made with.

    `address`, `old_model_id` and `new_model_id` say which; the message says what to do.
    """

    def __init__(
        self, message: str, *, address: str = "", old_model_id: str = "", new_model_id: str = ""
    ) -> None:
        super().__init__(message)
        self.address = address
        self.old_model_id = old_model_id
        self.new_model_id = new_model_id


class ModelSwitched(ModelChanged):
    """A request made for the model the server served before (`Sam3Client` runs it again)."""


def model_changed(
    address: str,
    old: str,
    new: str,
    what: str,
    todo: str,
    description: str = "",
    kind: type[ModelChanged] = ModelChanged,
) -> ModelChanged:
    """The exception for `what` made with model `old` on a server that now serves `new`."""
    return kind(
        f"the server at {address} now serves model {new[:12]}{description}; {what} was made "
        f"with model {old[:12]}: {todo}",
        address=address,
        old_model_id=old,
        new_model_id=new,
    )


@dataclass
class _Answer:
    score_thr: float
    max_det: int
    scores: np.ndarray
    boxes: np.ndarray
    masks: object  # RleMasks
    counts: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.masks.nbytes + self.scores.nbytes + self.boxes.nbytes)


class FeatureCacheClient:
    """Requests to `sam3_cached` for one client (thread-safe).

    `on_change(new_model_id)`: called once when the server turns out to serve another model
    (after everything held here was dropped); it re-reads the manifest and returns the model id
    the client serves from then on. `remote`: the engine is a server that may be restarted on
    another repository, so ask it which model it serves before answering from the memo.
    """

    def __init__(self, engine, model_id: str, *, on_change=None, remote: bool = False) -> None:
        self.engine = engine
        self.model_id = model_id
        self.on_change = on_change
        self.remote = remote
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._answers: OrderedDict[tuple, _Answer] = OrderedDict()
        self.results_bytes = RESULT_BYTES
        self._lock = threading.Lock()
        self._switch_lock = threading.Lock()
        self._local = threading.local()
        self.refiltered = 0
        self.resent = 0
        self.switches = 0
        self._closed = False
        self._says_model = self._declares_model_output()

    def _declares_model_output(self) -> bool:
        """Whether this repository's sam3_cached answers `cache_model_id` (older ones do not)."""
        outputs = getattr(self.engine.config(contract.CACHED), "outputs", ())
        return contract.CACHE_MODEL_ID in {o.name for o in outputs}

    def close(self) -> None:
        """Forget every answer; later requests go to the (closed) engine, which refuses them."""
        with self._lock:
            self._closed = True
            self._answers.clear()
            self._sent.clear()

    # -- keys --------------------------------------------------------------------------------
    def key(self, prepared, model_id: str | None = None) -> str:
        """The content key of a PreparedImage (computed once per image and model)."""
        model_id = self.model_id if model_id is None else model_id
        cached = getattr(prepared, "_cache_key", None)
        if cached is not None and cached[0] == model_id:
            return cached[1]
        key = image_key(prepared.images_u8, model_id)
        prepared._cache_key = (model_id, key)
        return key

    # -- the model served ----------------------------------------------------------------------
    def server_model(self) -> str:
        """The model_id the server serves now: one `info` request (no model runs)."""
        return self._served_by(*self._info_answer())

    def _served_by(self, out: dict, info: dict | None = None) -> str:
        said = _answered_model(out)
        if said is None and info is not None:
            said = info.get("model_id") if isinstance(info.get("model_id"), str) else None
        if said:
            return said
        # a sam3_cached that says neither: the repository's manifest, read again
        self.engine.refresh()
        return contract.manifest_from_config(self.engine.config(contract.SEGMENT)).model_id

    def _switch(self, model: str, served: str) -> None:
        """The server serves `served`, not `model`: drop what was held for `model`, follow the
        server (once, whichever thread notices first) and warn."""
        with self._switch_lock:
            if self.model_id != model:  # another thread followed the change already
                return
            with self._lock:
                self._answers.clear()
                self._sent.clear()
            now = self.on_change(served) if self.on_change is not None else served
            self.model_id = now
            self._says_model = self._declares_model_output()
            if now == model:  # the manifest names the old model still (see _check)
                return
            self.switches += 1
        warnings.warn(
            f"the server at {self.engine.address} now serves model {now[:12]}, no longer model "
            f"{model[:12]}: the answers and image keys cached for model {model[:12]} were "
            f"dropped; results from now on come from model {now[:12]}",
            RuntimeWarning,
            stacklevel=4,
        )

    def _check(self, model: str, served: str | None) -> None:
        """Raise ModelSwitched (after following the server) when `served` is not `model`."""
        if served is None or served == model:
            return
        self._switch(model, served)
        if self.model_id == model:  # its manifest still names the old model: not one repository
            raise ModelChanged(
                f"{contract.CACHED} at {self.engine.address} answered for model {served[:12]}, "
                f"but its manifest (the config of {contract.SEGMENT}) names model {model[:12]}: "
                "the server(s) there do not serve one repository (every server of a pool must "
                "serve the same one); restart them on one repository",
                address=self.engine.address,
                old_model_id=model,
                new_model_id=served,
            )
        raise model_changed(
            self.engine.address,
            model,
            self.model_id,
            "this request",
            "run it again (Sam3Client does so for calls on pixels)",
            kind=ModelSwitched,
        )

    @contextlib.contextmanager
    def pinned(self):
        """Calls in this block (this thread) belong to something made with the model served
        now: `Sam3Client` does not run them again on a new model (ModelSwitched is raised)."""
        previous = getattr(self._local, "pinned", False)
        self._local.pinned = True
        try:
            yield
        finally:
            self._local.pinned = previous

    @property
    def is_pinned(self) -> bool:
        return getattr(self._local, "pinned", False)

    def _mark_sent(self, key: str) -> None:
        with self._lock:
            self._sent[key] = None
            self._sent.move_to_end(key)
            while len(self._sent) > SENT_KEYS:
                self._sent.popitem(last=False)

    # -- requests ----------------------------------------------------------------------------
    def request(self, prepared, op: str, inputs: dict, outputs) -> tuple[dict, str]:
        """(outputs, status): status "hit" (features were held) or "encoded".

        Raises ModelSwitched when the server turns out to serve another model than this
        request was made for (its key, its inputs); what was held for the old model is dropped.
        """
        model = self.model_id
        key = self.key(prepared, model)
        with self._lock:
            send_pixels = key not in self._sent
        feed = {contract.CACHE_OP: _text(op), contract.IMAGE_ID: _text(key), **inputs}
        # the server's own rules, here first: a bad request is refused before it is sent
        validate.model_inputs({**feed, contract.IMAGES: prepared.images_u8})
        says_model = self._says_model
        wanted = [
            contract.CACHE_STATUS,
            *([contract.CACHE_MODEL_ID] if says_model else ()),
            *outputs,
        ]
        for _ in range(2):
            if send_pixels:
                feed[contract.IMAGES] = prepared.images_u8
            out = self._infer_checked(model, feed, wanted)
            status = _status(out)
            # an older repository names no model: its refusal of the pixels resent under the
            # old model's key is checked instead (see _infer_checked)
            self._check(model, _answered_model(out))
            if status != MISS:
                self._mark_sent(key)
                missing = [n for n in outputs if n not in out]
                if missing:
                    raise BadData(f"{contract.CACHED} answered without {', '.join(missing)}")
                return out, status
            if send_pixels:
                break
            with self._lock:
                self._sent.pop(key, None)
                self.resent += 1
            send_pixels = True
        raise BadData(
            f"{contract.CACHED} answered '{status}' to a request carrying the image: "
            "a wrong server answer"
        )

    def _infer_checked(self, model: str, feed: dict, wanted: list) -> dict:
        """One request; a refusal (the key of another model's pixels, another model's shapes)
        is ModelSwitched when the server serves another model now."""
        try:
            return self.engine.infer(contract.CACHED, feed, wanted)
        except ValueError as error:
            if not self.remote:
                raise
            refusal = error
        try:
            served = self.server_model()
        except (ConnectionError, ValueError):
            served = None
        self._check(model, served)
        if contract.CACHE_MODEL_ID in wanted:
            # the same model from a repository written before cache_model_id existed
            self.engine.refresh()
            self._says_model = self._declares_model_output()
            if not self._says_model:
                older = [name for name in wanted if name != contract.CACHE_MODEL_ID]
                return self.engine.infer(contract.CACHED, feed, older)
        raise refusal

    def ground(self, prepared, inputs: dict) -> tuple[dict, str]:
        """Grounding queries (the rows of token_ids) -> the multi-query answer, and its status.

        `inputs` as for `sam3_multi`/`sam3_segment` without the image: token_ids, exemplar
        slots or concept tensors, and the options.
        """
        options = _options(inputs)
        prompt = {k: v for k, v in inputs.items() if k not in (*OPTIONS, contract.IMAGES)}
        model = self.model_id
        answer_key = (self.key(prepared, model), _digest(prompt), options["mask_thr"])
        with self._lock:
            held = None if self._closed else self._answers.get(answer_key)
            covered = held is not None and _covers(held, options)
        if covered:
            if self.remote:  # a remote server may have been restarted on another model
                self._check(model, self.server_model())
            with self._lock:
                if answer_key in self._answers:
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
            masks = as_rle_masks(out[contract.MASKS_RLE])
            out[contract.MASKS_RLE] = RlePayload(masks)  # decoded once, here
            if len(masks) == len(scores):
                answer = _Answer(
                    options["score_thr"],
                    options["max_det"],
                    scores,
                    np.asarray(out[contract.BOXES], np.float32).reshape(-1, 4),
                    masks,
                    counts,
                )
                with self._lock:
                    self._answers.pop(answer_key, None)
                    if answer.nbytes <= self.results_bytes:
                        self._answers[answer_key] = answer
                    self._trim_answers()
        return out, status

    def _trim_answers(self) -> None:
        """Drop the least recently used answers beyond the bounds (the caller holds the lock)."""
        held = sum(a.nbytes for a in self._answers.values())
        while self._answers and (len(self._answers) > RESULT_ENTRIES or held > self.results_bytes):
            held -= self._answers.popitem(last=False)[1].nbytes

    def bound_results(self, max_bytes: int) -> int:
        """Hold at most `max_bytes` of answers from now on (0: none); the bound before."""
        with self._lock:
            previous, self.results_bytes = self.results_bytes, int(max_bytes)
            self._trim_answers()
        return previous

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
        model = self.model_id
        info = self._info(self.key(prepared, model))
        if self.model_id != model:  # the server serves another model: ask with its key
            info = self._info(self.key(prepared))
        return bool(info["held"])

    def _info_answer(self, key: str | None = None, op: str = "info") -> tuple[dict, dict]:
        feed = {contract.CACHE_OP: _text(op)}
        if key is not None:
            feed[contract.IMAGE_ID] = _text(key)
        # the JSON names the model (so does every sam3_cached): asking for cache_model_id too
        # would be refused by a server restarted on a repository that lacks the output
        out = self.engine.infer(contract.CACHED, feed, [contract.CACHE_STATUS, contract.CACHE_INFO])
        if contract.CACHE_INFO not in out:
            raise BadData(f"{contract.CACHED} answered no {contract.CACHE_INFO}")
        raw = np.asarray(out[contract.CACHE_INFO]).reshape(-1)[0]
        return out, json.loads(raw.decode() if isinstance(raw, bytes) else str(raw))

    def _info(self, key: str | None = None, op: str = "info") -> dict:
        """The `info` JSON; a server that serves another model now is followed (no raise)."""
        model = self.model_id
        out, info = self._info_answer(key, op)
        served = self._served_by(out, info)
        if served != model:
            self._switch(model, served)
        return info

    def info(self) -> dict:
        info = self._info()
        with self._lock:
            info["results"] = {
                "entries": len(self._answers),
                "max_entries": RESULT_ENTRIES,
                "bytes": sum(a.nbytes for a in self._answers.values()),
                "max_bytes": self.results_bytes,
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


def _answered_model(out: dict) -> str | None:
    """The model_id an answer names (`cache_model_id`), or None when it names none."""
    if contract.CACHE_MODEL_ID not in out:
        return None
    raw = np.asarray(out[contract.CACHE_MODEL_ID]).reshape(-1)
    if raw.size != 1:
        raise BadData(f"{contract.CACHED} answered {raw.size} values of {contract.CACHE_MODEL_ID}")
    value = raw[0].decode() if isinstance(raw[0], bytes) else str(raw[0])
    return value or None


def _status(out: dict) -> str:
    if contract.CACHE_STATUS not in out:
        raise BadData(f"{contract.CACHED} answered no {contract.CACHE_STATUS}")
    raw = np.asarray(out[contract.CACHE_STATUS]).reshape(-1)[0]
    status = raw.decode() if isinstance(raw, bytes) else str(raw)
    if status not in (HIT, ENCODED, MISS):
        raise BadData(f"{contract.CACHED} answered an unknown cache status {status[:40]!r}")
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
        contract.MASKS_RLE: RlePayload(held.masks.take(index)),  # no bytes made or parsed
        contract.KEYWORD_COUNTS: np.asarray(counts, np.int32),
    }
