"""The interactive prompts of one object being drawn in the dock: points, a box, undo, and the
ranked candidates the engine answered with (plain Python: no QGIS, no model).

Coordinates are map coordinates in the raster's CRS (the map tools transform the canvas's).
"""

from __future__ import annotations


class Prompts:
    """Points (x, y, 1 positive | 0 negative) and at most one box, in the order given, so that
    `undo` removes the last one; `candidates` are the engine's answer to them, best first."""

    def __init__(self) -> None:
        self._given: list[tuple[str, list[float]]] = []
        self.candidates: list[dict] = []
        self.chosen = 0
        self.token: str | None = None
        self.window: list[float] | None = None

    @property
    def points(self) -> list[list[float]]:
        return [value for kind, value in self._given if kind == "point"]

    @property
    def box(self) -> list[float] | None:
        boxes = [value for kind, value in self._given if kind == "box"]
        return boxes[-1] if boxes else None

    def __bool__(self) -> bool:
        return bool(self._given)

    def add_point(self, x: float, y: float, positive: bool) -> None:
        self._given.append(("point", [float(x), float(y), 1 if positive else 0]))

    def set_box(self, xmin: float, ymin: float, xmax: float, ymax: float) -> None:
        """One box per object: a new one replaces the earlier (undo brings that one back)."""
        box = [min(xmin, xmax), min(ymin, ymax), max(xmin, xmax), max(ymin, ymax)]
        self._given.append(("box", box))

    def undo(self) -> bool:
        """Drop the last prompt; False when there was none. The refinement token belongs to the
        prompts as they were, so it goes too: the next click starts from the remaining ones."""
        if not self._given:
            return False
        self._given.pop()
        self.token = None
        return True

    def reset(self) -> None:
        self._given.clear()
        self.answered([], None, None)

    def request(self, image: str) -> dict:
        """The engine's `click` parameters for these prompts."""
        return {"image": image, "points": self.points, "box": self.box, "previous": self.token}

    def answered(self, candidates: list[dict], token: str | None, window) -> None:
        self.candidates = list(candidates)
        self.chosen = 0
        self.token = token
        self.window = window

    def current(self) -> dict | None:
        return self.candidates[self.chosen] if self.candidates else None

    def cycle(self) -> dict | None:
        """The next-ranked candidate (after the last, the best again). The engine sends the
        best one's polygon with the click; one without ``wkt`` is asked for (`candidate`)."""
        if not self.candidates:
            return None
        self.chosen = (self.chosen + 1) % len(self.candidates)
        return self.candidates[self.chosen]

    def back(self) -> None:
        """Undo the last `cycle` (its polygon could not be had)."""
        if self.candidates:
            self.chosen = (self.chosen - 1) % len(self.candidates)

    def fill(self, candidate: dict) -> None:
        """The polygon of a listed candidate (the engine's `candidate` answer), by its index."""
        for i, listed in enumerate(self.candidates):
            if listed.get("index") == candidate.get("index"):
                self.candidates[i] = {**listed, **candidate}
