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

_KEEP = object()
REFILTER_OPTIONS = ("score_thr", "mask_thr", "max_det", "dedup")


class ImageHandle:
    def __init__(self, client, prepared) -> None:
        self.client = client
        self.prepared = prepared
        self.result: pd.DataFrame | None = None
        self._last: tuple[str, tuple, dict] | None = None

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
        return self.client._features.encode(self.prepared)

    def _remember(self, method: str, args: tuple, kwargs: dict) -> pd.DataFrame:
        frame = getattr(self.client, method)(self.prepared, *args, **kwargs)
        self._last = (method, args, kwargs)
        self.result = frame
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
        """The last segment/multi again with some options changed (the others as they were)."""
        if self._last is None:
            raise ValueError("nothing to re-filter: run segment() or multi() on this image first")
        method, args, kwargs = self._last
        changed = {
            name: value
            for name, value in zip(
                REFILTER_OPTIONS, (score_thr, mask_thr, max_det, dedup), strict=True
            )
            if value is not _KEEP
        }
        return self._remember(method, args, {**kwargs, **changed})

    def __repr__(self) -> str:
        rows, cols = self.letterbox.image_shape
        return f"ImageHandle({cols}x{rows}, key={self.key[:12]})"
