"""`client.image(img)`: one image, prepared once, whose methods are the prompts.

Every prompt through a handle (or through the client with the same pixels) reuses the image's
vision features held where the model runs. The handle adds what an interactive tool needs:
`cached()` ("features cached" vs "encoding the image"), `encode()` to pay for the encoder up
front, and `refilter()` to re-apply the last grounding prompt with other thresholds: a stricter
score_thr, a smaller max_det or another dedup run no model at all (`status` "refiltered"),
another mask_thr or a looser score_thr only the postprocess.
"""

from __future__ import annotations

import pandas as pd

from napari_sam3.client.cache import ModelSwitched
from napari_sam3.core.errors import InvalidInput

_KEEP = object()
REFILTER_OPTIONS = ("score_thr", "mask_thr", "max_det", "dedup")


class ImageHandle:
    def __init__(self, client, prepared) -> None:
        self.client = client
        self.prepared = prepared
        self.result: pd.DataFrame | None = None
        self._last: tuple[str, tuple, dict] | None = None
        self._model_id: str | None = None  # the model of `result`

    @property
    def key(self) -> str:
        """The image's content key (blake2b of the model input and the model id)."""
        return self.client._features.key(self.prepared)

    @property
    def letterbox(self):
        return self.prepared.letterbox

    @property
    def status(self) -> str | None:
        """How the last result was made: "encoded" (the image went through the encoder),
        "hit" (its features were held), "refiltered" (no request at all); None before one."""
        return None if self.result is None else self.result.attrs.get("cache")

    def cached(self) -> bool:
        """Whether the model holds this image's features now (the next prompt costs a head)."""
        return self.client._features.held(self.prepared)

    def encode(self) -> str:
        """Run the encoder now unless the features are held: "encoded" or "hit"."""
        try:
            return self.client._features.encode(self.prepared)
        except ModelSwitched:  # the server serves another model now: encode for that one
            return self.client._features.encode(self.prepared)

    def _remember(self, method: str, args: tuple, kwargs: dict) -> pd.DataFrame:
        frame = getattr(self.client, method)(self.prepared, *args, **kwargs)
        self._last = (method, args, kwargs)
        self.result = frame
        self._model_id = self.client.model_id
        return frame

    def segment(self, prompt: str | None = None, **kwargs) -> pd.DataFrame:
        """`Sam3Client.segment` on this image (same keywords)."""
        return self._remember("segment", (prompt,), kwargs)

    def multi(self, keywords=(), **kwargs) -> pd.DataFrame:
        """`Sam3Client.multi` on this image (same keywords)."""
        return self._remember("multi", (list(keywords),), kwargs)

    def encode_exemplars(self, boxes, labels=None, name: str = ""):
        return self.client.encode_exemplars(self.prepared, boxes, labels, name=name)

    def interactive(self):
        return self.client.interactive(self.prepared)

    def refilter(
        self, *, score_thr=_KEEP, mask_thr=_KEEP, max_det=_KEEP, dedup=_KEEP
    ) -> pd.DataFrame:
        """The last segment/multi again with some options changed (the others as they were).

        Raises `ModelChanged` when the server now serves another model than the one that made
        the last result (a remote server restarted on another repository).
        """
        if self._last is None:
            raise InvalidInput("nothing to re-filter: run segment() or multi() on this image first")
        method, args, kwargs = self._last
        changed = {
            name: value
            for name, value in zip(
                REFILTER_OPTIONS, (score_thr, mask_thr, max_det, dedup), strict=True
            )
            if value is not _KEEP
        }
        self._check_model()  # a change noticed since
        # a change noticed by this call (its answer, or the question before a memo answer)
        # raises here rather than being answered by the new model
        with self.client._features.pinned():
            try:
                frame = getattr(self.client, method)(self.prepared, *args, **{**kwargs, **changed})
            except ModelSwitched:
                if self.client.model_id == self._model_id:
                    raise
        self._check_model()  # raises after a switch
        self._last = (method, args, {**kwargs, **changed})
        self.result = frame
        return frame

    def _check_model(self) -> None:
        if self.client.model_id != self._model_id:
            raise self.client._changed(
                self._model_id,
                "the last result of this image handle",
                "run segment() or multi() on it again (the new model answers them)",
            )

    def __repr__(self) -> str:
        rows, cols = self.letterbox.image_shape
        return f"ImageHandle({cols}x{rows}, key={self.key[:12]})"
