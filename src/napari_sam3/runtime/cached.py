"""`sam3_cached`: every prompt on an image already seen reuses its vision features.

One model in front of the heads holds the unified encoder's outputs (both necks) per image,
keyed by the content of the exact model input (`image_key`: blake2b of the letterboxed uint8
tensor and the model id), in an LRU bounded in bytes and by a TTL (config parameters
`cache_bytes`, `cache_ttl_s`). Grounding (text, exemplars, concepts, several queries), concept
encoding and interactive prompts all read the same entry, so ONE encoder pass serves them all.

A request carries `cache_op` and the image's key in `image_id`; it carries `images_u8` only
when the client thinks the server lacks the image. An id the cache does not hold is answered
with `cache_status` = "miss" and nothing else (the client sends the pixels again); pixels are
always keyed by their own hash here, so an id can never select another image's features.

The raw decoder outputs of recent grounding prompts are kept too (`heads_cache_bytes`), so a
prompt asked again with another score_thr / mask_thr / max_det runs only the postprocess.

Ops: "ground" (token_ids rows; exemplar slots for 1 or N rows; the last C rows with concepts),
"concept" (exemplars -> concept tokens), "interactive" (clicks / box / mask, or a point grid),
"encode" (make sure the features are held), "info" (statistics, and whether `image_id` is
held), "clear" (drop everything). Every answer carries `cache_model_id`, the model_id this
model serves (the key of an image depends on it), so that a client notices at once when the
server it talks to was restarted on another repository.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

if __package__:  # inside napari_sam3 (a real ImportError surfaces as it is)
    from napari_sam3.core import contract, validate
    from napari_sam3.core.errors import InvalidInput
    from napari_sam3.masks import rle
    from napari_sam3.runtime import postprocess as post
else:  # the copies beside the Triton model, where siblings are plain modules
    import contract
    import postprocess as post
    import rle
    import validate
    from errors import InvalidInput

OPS = ("ground", "concept", "interactive", "encode", "info", "clear")
HIT, MISS, ENCODED = "hit", "miss", "encoded"
# Four full-size images (both necks, fp32: see image_bytes) by default.
FULL_SIZE = contract.Sizes(image_size=1008, d_model=256, num_queries=200)
DEFAULT_IMAGES = 4
DEFAULT_TTL_S = 900.0


def image_bytes(sizes: contract.Sizes) -> int:
    """Bytes one image's cached features take: every output of the unified encoder."""
    total = 0
    for spec in contract.vision_specs(sizes):
        total += int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
    return total


def heads_bytes(sizes: contract.Sizes) -> int:
    """Bytes one grounding prompt's raw decoder outputs take."""
    total = 0
    for spec in contract.decoder_output_specs(sizes):
        total += int(np.prod(spec.shape)) * np.dtype(spec.dtype).itemsize
    return total


DEFAULT_CACHE_BYTES = DEFAULT_IMAGES * image_bytes(FULL_SIZE)
DEFAULT_HEADS_CACHE_BYTES = DEFAULT_IMAGES * heads_bytes(FULL_SIZE)


def image_key(images_u8: np.ndarray, model_id: str) -> str:
    """The cache key of one model input: its exact bytes, shape and dtype, and the model."""
    array = np.ascontiguousarray(images_u8)
    digest = hashlib.blake2b(digest_size=20)
    digest.update(model_id.encode())
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _held(array) -> np.ndarray:
    """An output to keep in a cache: as it is where it owns its memory (OpenVINO's are fresh
    arrays; the copy cost 0.2 s for a prompt's 66 MB of heads), else a copy (a view may be of a
    runtime's or Triton's buffers, which the next request reuses)."""
    array = np.asarray(array)
    return array if array.flags.owndata and array.flags.writeable else array.copy()


def _nbytes(value: dict) -> int:
    return sum(np.asarray(v).nbytes for v in value.values())


class ByteLRU:
    """A thread-safe LRU of dicts of arrays, bounded in bytes and by a TTL, with statistics.

    `get_or_compute` computes a missing key once while other threads asking for the same key
    wait for it (at worst twice, if the first entry was evicted before they woke). The TTL
    counts the seconds of `clock` (a test gives its own).
    """

    def __init__(
        self,
        max_bytes: int,
        ttl_s: float,
        item_bytes: int = 0,
        what: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.item_bytes, self.what = int(item_bytes), what
        self._clock = clock
        self.max_bytes, self.ttl_s = self._checked(max_bytes), float(ttl_s)
        self._items: OrderedDict[str, tuple[float, int, dict]] = OrderedDict()
        self._inflight: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = self.evictions = self.expired = self.computed = 0

    def _checked(self, max_bytes: int) -> int:
        if max_bytes < self.item_bytes:
            raise InvalidInput(
                f"cache bound {max_bytes} bytes holds no {self.what or 'entry'}: one needs "
                f"{self.item_bytes} bytes ({self.item_bytes / 1e6:.1f} MB); raise the bound to at "
                "least that"
            )
        return int(max_bytes)

    def _evict_to(self, limit: int) -> None:
        """Drop the least recently used entries until at most `limit` bytes are held."""
        while self._items and self.bytes > limit:
            self._drop(next(iter(self._items)))
            self.evictions += 1

    def _drop(self, key: str) -> None:
        _, size, _ = self._items.pop(key)
        self.bytes -= size

    def _expire(self, now: float) -> None:
        for key in [k for k, (t, _, _) in self._items.items() if now - t > self.ttl_s]:
            self._drop(key)
            self.expired += 1

    def _lookup(self, key: str, count: bool = True) -> dict | None:
        now = self._clock()
        self._expire(now)
        item = self._items.get(key)
        if item is None:
            if count:
                self.misses += 1
            return None
        if count:
            self.hits += 1
        self._items[key] = (now, item[1], item[2])
        self._items.move_to_end(key)
        return item[2]

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._lookup(key)

    def holds(self, key: str) -> bool:
        """Whether `key` is held, without touching the order or the counts."""
        with self._lock:
            self._expire(self._clock())
            return key in self._items

    def put(self, key: str, value: dict) -> bool:
        """Store `value`, evicting the least recently used first; False if it can never fit."""
        size = _nbytes(value)
        with self._lock:
            if size > self.max_bytes:
                return False
            if key in self._items:
                self._drop(key)
            self._expire(self._clock())
            self._evict_to(self.max_bytes - size)
            self._items[key] = (self._clock(), size, value)
            self.bytes += size
            return True

    def resize(self, max_bytes: int) -> int:
        """Bound the cache at `max_bytes` from now on (least recently used entries evicted to
        fit); the previous bound."""
        max_bytes = self._checked(max_bytes)
        with self._lock:
            previous, self.max_bytes = self.max_bytes, max_bytes
            self._evict_to(max_bytes)
        return previous

    def get_or_compute(self, key: str, compute) -> tuple[dict, bool]:
        """(value, was_cached)."""
        while True:
            with self._lock:
                value = self._lookup(key)
                if value is not None:
                    return value, True
                event = self._inflight.get(key)
                if event is None:
                    event = self._inflight[key] = threading.Event()
                    break
            event.wait()
            with self._lock:
                value = self._lookup(key, count=False)
                if value is not None:
                    self.misses -= 1  # it was counted as a miss above, but served from cache
                    self.hits += 1
                    return value, True
            # evicted before we woke: compute it ourselves (the "at worst twice" case)
        try:
            value = compute()
            self.computed += 1
            self.put(key, value)
            return value, False
        finally:
            with self._lock:
                self._inflight.pop(key, None)
            event.set()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def info(self) -> dict:
        with self._lock:
            self._expire(self._clock())
            return {
                "entries": len(self._items),
                "bytes": self.bytes,
                "max_bytes": self.max_bytes,
                "ttl_s": self.ttl_s,
                "hits": self.hits,
                "misses": self.misses,
                "computed": self.computed,
                "evictions": self.evictions,
                "expired": self.expired,
            }

    def __len__(self) -> int:
        return len(self._items)


def _string(inputs: dict, name: str) -> str | None:
    if name not in inputs:
        return None
    value = np.asarray(inputs[name]).reshape(-1)
    if value.size != 1:
        raise InvalidInput(f"{name} must hold one string")
    text = value[0]
    text = text.decode() if isinstance(text, bytes) else str(text)
    return text or None


def _rows(value, n: int, name: str) -> np.ndarray:
    value = np.asarray(value)
    if len(value) == n:
        return value
    if len(value) == 1:
        return np.repeat(value, n, axis=0)
    raise InvalidInput(f"{name} has {len(value)} rows; send 1 or one per query ({n})")


def _digest(*arrays) -> str:
    digest = hashlib.blake2b(digest_size=20)
    for a in arrays:
        a = np.ascontiguousarray(a)
        digest.update(f"{a.dtype.str}{a.shape}".encode())
        digest.update(memoryview(a).cast("B"))
    return digest.hexdigest()


class Logic:
    def __init__(self, model_dir: str, parameters: dict) -> None:
        manifest = self.manifest = contract.manifest_from_config(parameters)
        self.model_id = manifest.model_id
        self.sizes = manifest.sizes
        self.image_size = manifest.image_size
        self.slots = manifest.exemplar_slots
        self.max_keywords = manifest.max_keywords
        self.grid_batch = int(parameters.get("grid_batch", contract.PVS_GRID_BATCH))
        ttl = float(parameters.get("cache_ttl_s", DEFAULT_TTL_S))
        self.image_bytes = image_bytes(self.sizes)
        self.features = ByteLRU(
            int(parameters.get("cache_bytes", DEFAULT_CACHE_BYTES)),
            ttl,
            self.image_bytes,
            f"image of this {manifest.size} model (cache_bytes)",
        )
        self.heads = ByteLRU(
            int(parameters.get("heads_cache_bytes", DEFAULT_HEADS_CACHE_BYTES)), ttl
        )

    # -- features ----------------------------------------------------------------------------
    def _features(self, inputs: dict, call) -> tuple[str, dict | None, str]:
        """(key, features or None on a miss, status)."""
        given = _string(inputs, contract.IMAGE_ID)
        if contract.IMAGES not in inputs:
            if given is None:
                raise InvalidInput(
                    f"send {contract.IMAGES} or the {contract.IMAGE_ID} of a held one"
                )
            features = self.features.get(given)
            return given, features, HIT if features is not None else MISS
        images = np.asarray(inputs[contract.IMAGES])
        key = image_key(images, self.model_id)
        if given is not None and given != key:
            raise InvalidInput(
                f"{contract.IMAGE_ID} {given[:12]}... is not the key of the pixels sent "
                f"({key[:12]}... for model {self.model_id[:12]}); compute it with "
                "napari_sam3's image_key and this model's id"
            )

        def encode():
            out = call(contract.ENCODER, {contract.IMAGES: images}, contract.VISION_TENSORS)
            return {name: _held(out[name]) for name in contract.VISION_TENSORS}

        features, cached = self.features.get_or_compute(key, encode)
        return key, features, HIT if cached else ENCODED

    def info(self, key: str | None = None) -> dict:
        return {
            "model_id": self.model_id,
            "image_bytes": self.image_bytes,
            "features": self.features.info(),
            "heads": self.heads.info(),
            "held": None if key is None else self.features.holds(key),
        }

    def run(self, inputs: dict, call, outputs=None) -> dict:
        """One request; `outputs`, the names asked for (None: all), may spare work: a click's
        masks are made only when asked for (an embedded client makes them itself, lazily)."""
        validate.model_inputs(inputs, self.manifest)  # the client's rules, before any work
        out = self._run(inputs, call, outputs)
        out[contract.CACHE_MODEL_ID] = _text(self.model_id)  # with every answer, a miss too
        return out

    def _run(self, inputs: dict, call, outputs=None) -> dict:
        op = _string(inputs, contract.CACHE_OP)
        if op not in OPS:
            raise InvalidInput(f"{contract.CACHE_OP} must be one of {', '.join(OPS)}, got {op!r}")
        if op == "clear":
            self.features.clear()
            self.heads.clear()
        if op in ("info", "clear"):
            key = _string(inputs, contract.IMAGE_ID)
            info = self.info(key)
            status = HIT if info["held"] else MISS
            return {**_status(status), contract.CACHE_INFO: _text(json.dumps(info))}
        key, features, status = self._features(inputs, call)
        out = _status(status)
        if features is None or op == "encode":
            return out
        if op == "ground":
            out.update(self._ground(key, features, inputs, call))
        elif op == "concept":
            out.update(self._concept(features, inputs, call))
        else:
            masks = outputs is None or contract.MASKS_RLE in outputs
            out.update(self._interactive(features, inputs, call, masks))
        return out

    # -- grounding -----------------------------------------------------------------------------
    def _ground(self, key: str, vision: dict, inputs: dict, call) -> dict:
        def held(row, prompt, decode):
            prompt_key = _digest(np.frombuffer(key.encode(), np.uint8), row, *prompt.values())
            kept = self.heads.get_or_compute(
                prompt_key, lambda: {name: _held(value) for name, value in decode().items()}
            )
            return kept[0]

        return ground(vision, inputs, call, self.image_size, self.slots, self.max_keywords, held)

    # -- concepts ------------------------------------------------------------------------------
    def _concept(self, vision: dict, inputs: dict, call) -> dict:
        exemplars = exemplar_inputs(inputs, 1, self.slots)
        feed = {
            contract.DET_FPN[2]: vision[contract.DET_FPN[2]],
            contract.DET_POS: vision[contract.DET_POS],
        }
        out = call(contract.CONCEPT_ENCODER, {**feed, **exemplars}, contract.CONCEPT_OUTPUTS)
        return {
            out_name: np.asarray(out[name])
            for name, out_name in zip(
                contract.CONCEPT_OUTPUTS, contract.ENCODED_CONCEPT, strict=True
            )
        }

    # -- interactive ---------------------------------------------------------------------------
    def _interactive(self, vision: dict, inputs: dict, call, masks: bool = True) -> dict:
        features = {name: vision[name] for name in contract.PVS_FEATURES}
        out = {}
        if contract.PVS_POINT_COORDS in inputs:
            out.update(decode_click(features, inputs, call, self.image_size, masks))
        if contract.PVS_GRID_COORDS in inputs:
            out.update(decode_grid(features, inputs, call, self.grid_batch))
        if not out:
            raise InvalidInput("an interactive request needs a prompt or grid_coords")
        return out

    def close(self) -> None:
        self.features.clear()
        self.heads.clear()


def ground(
    vision: dict,
    inputs: dict,
    call,
    image_size: int,
    slots: int,
    max_keywords: int,
    heads: Callable[[np.ndarray, dict, Callable[[], dict]], dict] | None = None,
) -> dict:
    """Grounding on one image's vision features, the logic of `sam3_cached`'s "ground" op and of
    `sam3_multi`: each row of token_ids through the text encoder and the decoder with its
    exemplar row or, for the last C rows, the concept decoder with concept c; then the
    postprocess. Results are concatenated query after query, `keyword_counts` telling how many
    belong to each. `heads(row, prompt, decode)` gives one query's raw decoder outputs, `decode()`
    computing them (a cache goes there); None: each is decoded."""
    tokens = np.asarray(inputs.get(contract.TOKEN_IDS), np.int64)
    if tokens.ndim != 2 or len(tokens) == 0:
        raise InvalidInput(f"{contract.TOKEN_IDS} must be [N, {contract.TEXT_TOKENS}], N >= 1")
    n = len(tokens)
    if n > max_keywords:
        raise InvalidInput(f"at most {max_keywords} queries per request, got {n}")
    exemplars = exemplar_inputs(inputs, n, slots)
    concepts = concept_inputs(inputs, n)
    first_concept = n - len(concepts)
    options = {
        "score_thr": post.scalar(inputs, contract.SCORE_THR, post.DEFAULT_SCORE_THR, float),
        "mask_thr": post.scalar(inputs, contract.MASK_THR, post.DEFAULT_MASK_THR, float),
        "max_det": post.scalar(inputs, contract.MAX_DET, post.DEFAULT_MAX_DET, int),
    }
    grounding = {name: vision[name] for name in contract.GROUNDING_VISION}
    scores, boxes, masks, counts = [], [], [], []
    for i, row in enumerate(tokens):
        if i >= first_concept:
            prompt = concepts[i - first_concept]
            head = contract.DECODER_CT
        else:
            prompt = {name: value[i : i + 1] for name, value in exemplars.items()}
            head = contract.DECODER

        def decode(row=row, prompt=prompt, head=head):
            text = call(
                contract.TEXT,
                {contract.TOKEN_IDS: row[None]},
                (contract.TEXT_FEATURES, contract.TEXT_PADDING_MASK),
            )
            out = call(head, {**grounding, **text, **prompt}, contract.DECODER_OUTPUTS)
            return {name: out[name] for name in contract.DECODER_OUTPUTS}

        raw = decode() if heads is None else heads(row, prompt, decode)
        s, b, decoded = post.postprocess_masks(
            raw[contract.PRED_LOGITS],
            raw[contract.PRED_BOXES],
            raw[contract.PRED_MASKS],
            raw[contract.PRESENCE_LOGIT],
            image_size,
            **options,
        )
        scores.append(s)
        boxes.append(b.reshape(-1, 4))
        masks.append(decoded)
        counts.append(len(decoded))
    size = (image_size, image_size)
    return {
        contract.SCORES: np.concatenate(scores).astype(np.float32),
        contract.BOXES: np.concatenate(boxes).astype(np.float32),
        # in-process the client takes the runs as they are; bytes only across a process
        contract.MASKS_RLE: rle.RlePayload(rle.RleMasks.concat(masks, size)),
        contract.KEYWORD_COUNTS: np.asarray(counts, np.int32),
    }


def exemplar_inputs(inputs: dict, n: int, slots: int) -> dict:
    """The exemplar slots of `n` queries: 1 row sent for all or one per query; none sent, empty."""
    names = (contract.EXEMPLAR_BOXES, contract.EXEMPLAR_LABELS, contract.EXEMPLAR_VALID)
    dtypes = (np.float32, np.int64, np.bool_)
    present = [name for name in names if name in inputs]
    if not present:
        return {
            contract.EXEMPLAR_BOXES: np.zeros((n, slots, 4), np.float32),
            contract.EXEMPLAR_LABELS: np.zeros((n, slots), np.int64),
            contract.EXEMPLAR_VALID: np.zeros((n, slots), np.bool_),
        }
    if len(present) != 3:
        raise InvalidInput(f"send all of {', '.join(names)}, or none")
    return {
        name: _rows(np.asarray(inputs[name], dtype), n, name)
        for name, dtype in zip(names, dtypes, strict=True)
    }


def decode_click(features: dict, inputs: dict, call, image_size: int, masks: bool = True) -> dict:
    """One interactive prompt (points, box, mask input) on held features: 3 candidates, their
    full-size masks too unless `masks` is False (low-res logits and IoUs only)."""
    missing = [n for n in contract.PVS_PROMPTS if n not in inputs]
    if missing:
        raise InvalidInput(f"a prompt needs {', '.join(missing)}")
    prompt = {n: inputs[n] for n in contract.PVS_PROMPTS}
    result = call(contract.PVS_DECODER, {**features, **prompt}, contract.PVS_DECODER_OUTPUTS)
    low_res = np.asarray(result[contract.PVS_DECODER_MASKS], np.float32)
    out = {
        contract.PVS_IOU: np.asarray(result[contract.PVS_DECODER_IOU], np.float32),
        contract.PVS_LOW_RES: low_res,
    }
    if masks:
        cut = post.INTERACTIVE_CUT
        out[contract.MASKS_RLE] = rle.RlePayload(post.threshold_masks(low_res[0], image_size, cut))
    return out


def decode_grid(features: dict, inputs: dict, call, grid_batch: int) -> dict:
    """Everything mode's point grid on held features, in batches of the grid graph's size."""
    coords = np.asarray(inputs[contract.PVS_GRID_COORDS], np.float32)
    labels = np.asarray(inputs.get(contract.PVS_GRID_LABELS), np.float32)
    if coords.ndim != 3 or coords.shape[-1] != 2 or labels.shape != coords.shape[:2]:
        raise InvalidInput("grid prompts are coords [N, P, 2] with labels [N, P]")
    low_res, iou = [], []
    b = grid_batch
    for start in range(0, len(coords), b):
        chunk_c, chunk_l = coords[start : start + b], labels[start : start + b]
        n = len(chunk_c)
        pad_c = np.zeros((b, *coords.shape[1:]), np.float32)
        pad_l = np.full((b, labels.shape[1]), -1, np.float32)
        pad_c[:n], pad_l[:n] = chunk_c, chunk_l
        result = call(
            contract.PVS_GRID_DECODER,
            {**features, contract.PVS_POINT_COORDS: pad_c, contract.PVS_POINT_LABELS: pad_l},
            contract.PVS_DECODER_OUTPUTS,
        )
        low_res.append(np.asarray(result[contract.PVS_DECODER_MASKS], np.float32)[:n])
        iou.append(np.asarray(result[contract.PVS_DECODER_IOU], np.float32)[:n])
    return {
        contract.PVS_GRID_LOW_RES: np.concatenate(low_res),
        contract.PVS_GRID_IOU: np.concatenate(iou),
    }


def _text(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=np.object_)


def _status(status: str) -> dict:
    return {contract.CACHE_STATUS: _text(status)}


def concept_inputs(inputs: dict, rows: int) -> list[dict]:
    """One {concept_tokens [1,T,D], concept_padding_mask [1,T]} per concept sent."""
    names = contract.CONCEPT_OUTPUTS
    present = [n for n in names if n in inputs]
    if not present:
        return []
    if len(present) != 2:
        raise InvalidInput(f"send both {names[0]} and {names[1]}, or neither")
    tokens = np.asarray(inputs[names[0]], np.float32)
    padding = np.asarray(inputs[names[1]], np.bool_)
    if len(tokens) != len(padding):
        raise InvalidInput(f"{len(tokens)} concept token sets but {len(padding)} padding masks")
    if len(tokens) > rows:
        raise InvalidInput(
            f"{len(tokens)} concepts but only {rows} rows of {contract.TOKEN_IDS}: each concept "
            "needs its text row (the last rows)"
        )
    return [{names[0]: tokens[c : c + 1], names[1]: padding[c : c + 1]} for c in range(len(tokens))]
