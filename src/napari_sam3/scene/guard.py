"""What a scene run checks between its tiles, and what it says when it stops.

One model for every tile: the run keeps the model the client serves when it starts and checks
after each tile that the client still serves it. A server restarted on another repository
mid-scene makes the client follow it (``Sam3Client`` runs a call again on the new model: right
for one image, wrong for a scene half done), so the run stops there with ``ModelChanged``
instead of merging tiles of two models. A run stopped by a lost server, a deadline or a model
change says how many of its tiles were done: the result (and the output file written from it)
comes only after the last tile, so nothing was written.
"""

from __future__ import annotations

import copy
from typing import Any

from napari_sam3.client.cache import ModelChanged, model_changed
from napari_sam3.core.errors import Sam3Error

__all__ = ["TileGuard"]

# what stops a run on its way, and is worth the tiles done: the server, the time, the model
_NOTED = (ConnectionError, TimeoutError, ModelChanged)


class TileGuard:
    """The checks of one scene run of ``total`` tiles on ``name`` (a file name)."""

    def __init__(self, client: Any, name: str, total: int) -> None:
        self.client, self.name, self.total = client, name, total
        self.model_id = client.model_id
        self.done = 0

    def _stopped(self) -> str:
        return f"stopped after {self.done} of {self.total} tiles"

    def tile_done(self, done: int) -> None:
        """`done` tiles are through; raise ModelChanged when the client serves another model.

        The client follows a new model before it returns any answer of it, so the tiles
        checked before this one are all the first model's; this one may be the new one's."""
        served = self.client.model_id
        self.done = done if served == self.model_id else done - 1
        if served != self.model_id:
            error = model_changed(
                self.client.address,
                self.model_id,
                served,
                f"the scene run of {self.name} ({self._stopped()})",
                "its tiles cannot be merged across two models, and nothing was written; run "
                "the scene again to segment every tile with the model served now",
            )
            error.tiles_done = (self.done, self.total)
            raise error

    def stopped(self, error: BaseException) -> BaseException | None:
        """`error`, which stopped the run, saying how far it came (an exception of the same
        class and attributes); None for errors that need no such note."""
        if not isinstance(error, Sam3Error) or not isinstance(error, _NOTED):
            return None
        if getattr(error, "tiles_done", None) is not None:
            return None  # raised by tile_done: it says so already
        noted = copy.copy(error)
        noted.args = (
            f"{error}; the scene run of {self.name} {self._stopped()}, nothing was written",
        )
        noted.tiles_done = (self.done, self.total)
        return noted
