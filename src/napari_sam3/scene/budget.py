"""A scene run's memory budget: one bound for the tiles in flight, the caches and the detections.

Beyond the engine itself (weights and compiled graphs, loaded once), a scene run's memory goes to:

- every tile in flight: its vision features (``image_bytes``: 146 MB at full size), held by the
  embedded engine's feature cache while the tile's queries run (a server holds its own);
- every query in a request: its raw head outputs (``heads_bytes``: 66 MB at full size, in the
  process that runs the model) and the work of turning them into masks (upsampling, runs,
  deduplication), which peaks at about ``WORK_PER_MASK_BYTE`` times the runs of all the masks the
  model answered for the query, before deduplication;
- the read-ahead tiles' pixels;
- the detections held until the seams are merged (their masks as runs).

During a run the heads cache and the answers kept for re-filtering are off (a tile's prompts are
not re-filtered), and the feature cache holds what the rest leaves of the budget, at most its own
bound (so that a run again with other prompts encodes no tile it still holds). The plan runs the
first tile alone, one query per request, measures what its masks take, and from then on puts as
many queries in a request and as many tiles in flight as the budget leaves room for (at least one
of each: a budget below one tile's need slows the run down to one query at a time, it never stops
it). The detections never depend on the plan: queries are independent, and tiles are merged in
order.
"""

from __future__ import annotations

from dataclasses import dataclass

import psutil
from dask.utils import format_bytes, parse_bytes

from napari_sam3.core.errors import InvalidInput

__all__ = [
    "DEFAULT_BUDGET_CAP",
    "DEFAULT_BUDGET_SHARE",
    "ScenePlan",
    "default_budget",
    "resolve_budget",
]

DEFAULT_BUDGET_SHARE = 0.25  # of the memory available when the run starts
DEFAULT_BUDGET_CAP = 3 * 2**29  # 1.5 GiB: what a scene may add to the engine on a 16 GB laptop
MIN_BUDGET = 2**27  # 128 MiB: smaller values are a unit mistake, not a plan
# Measured at full size (bench/bench_memory.py, noise-like masks of random weights): a query whose
# answer took 0.17-0.29 GB of runs raised the RSS by 0.6-1.2 GB (numpy's own count: 2.8x the runs).
WORK_PER_MASK_BYTE = 5


def default_budget(available: int | None = None) -> int:
    """A quarter of the memory ``available`` (default: psutil's figure now), at most
    ``DEFAULT_BUDGET_CAP``, at least ``MIN_BUDGET``."""
    if available is None:
        available = psutil.virtual_memory().available
    return max(MIN_BUDGET, min(DEFAULT_BUDGET_CAP, int(available * DEFAULT_BUDGET_SHARE)))


def resolve_budget(value: int | float | str | None) -> int:
    """A memory budget in bytes from an int, a size such as ``"1.5GB"`` or ``"2GiB"`` (dask's
    units), or None / ``"auto"`` for :func:`default_budget`."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return default_budget()
    if isinstance(value, bool):
        raise InvalidInput(f"memory budget must be a size such as '1.5GB', got {value!r}")
    if isinstance(value, str):
        try:
            value = parse_bytes(value)
        except ValueError:
            raise InvalidInput(
                f"memory budget must be a size such as '1.5GB', '800MB' or '2GiB', got {value!r}"
            ) from None
    if not isinstance(value, int | float) or value != value:
        raise InvalidInput(f"memory budget must be a size such as '1.5GB', got {value!r}")
    if value < MIN_BUDGET:
        raise InvalidInput(
            f"memory budget {format_bytes(int(value))} is too small to plan a scene with: give at "
            f"least {format_bytes(MIN_BUDGET)} (sizes take units: '1.5GB', '800MB')"
        )
    return int(value)


@dataclass
class ScenePlan:
    """How many queries go in one request and how many tiles are in flight, within ``budget``.

    ``features``: one tile's vision features in this process (0 where a server runs the model);
    ``query``: one query's raw head outputs in this process (0 likewise); ``tile``: one tile's
    pixels as read and prepared; ``queries``: queries per tile; ``per_request``: the most the
    model takes in one request; ``requested``: the tiles in flight asked for; ``cache``: the
    feature cache's own bound (what it may hold when the budget leaves room: a run again with
    other prompts then encodes no tile it holds).
    """

    budget: int
    features: int
    query: int
    tile: int
    queries: int
    per_request: int
    requested: int
    cache: int = 0
    mask_bytes: int = 0  # the most one query's masks took on a tile so far (runs)
    measured: bool = False
    held: int = 0  # the detections' masks held for the merge
    peak_held: int = 0

    def query_cost(self) -> int:
        return self.query + WORK_PER_MASK_BYTE * self.mask_bytes

    def request_size(self) -> int:
        """Queries to put in the next request: one until a tile was measured, then as many as
        fit beside one tile's features and pixels (at least one)."""
        if not self.measured:
            return 1
        room = self.budget - self.held - self.features - self.tile
        fits = room // max(1, self.query_cost())
        return max(1, min(self.per_request, self.queries, int(fits)))

    def tile_cost(self) -> int:
        return self.features + self.tile + self.request_size() * self.query_cost()

    def in_flight(self) -> int:
        """Tiles the budget lets run at once now: one until a tile was measured, then as many
        as fit (at least one, at most the requested)."""
        if not self.measured:
            return 1
        fits = (self.budget - self.held) // max(1, self.tile_cost())
        return max(1, min(self.requested, int(fits)))

    def feature_cache(self) -> int:
        """The feature cache's bound now: what the tiles in flight, their work and the
        detections held leave of the budget, at least the features of the tiles in flight, at
        most the cache's own bound. Before a tile was measured the work is taken as one query
        whose masks take nothing: the cache is trimmed to its share after the first tile."""
        if not self.features:
            return 0
        tiles = self.in_flight()
        work = tiles * (self.tile + self.request_size() * self.query_cost())
        room = self.budget - self.held - work
        return max(tiles * self.features, min(self.cache, room))

    def observe(self, query_mask_bytes: list[int], held_added: int) -> None:
        """After a tile: the runs each of its queries returned, and what it added to the held."""
        if query_mask_bytes:
            self.mask_bytes = max(self.mask_bytes, *query_mask_bytes)
        self.measured = True
        self.held += held_added
        self.peak_held = max(self.peak_held, self.held)

    def over_budget(self) -> bool:
        """Whether the detections held alone exceed the budget (they are kept: nothing found is
        dropped, but the run takes more memory than it was given)."""
        return self.held > self.budget

    def report(self) -> dict:
        return {
            "budget": self.budget,
            "features_per_tile": self.features,
            "heads_per_query": self.query,
            "masks_per_query": self.mask_bytes,
            "queries_per_request": self.request_size(),
            "in_flight": self.in_flight(),
            "feature_cache": self.feature_cache(),
            "detections_held": self.peak_held,
        }


def describe_plan(report: dict) -> str:
    """One line for the analyst from a run's ``df.attrs["memory"]``."""
    prompts = report["queries_per_request"]
    tiles = report["in_flight"]
    return (
        f"memory budget {format_bytes(report['budget'])}: {prompts} prompt{'s'[: prompts > 1]} "
        f"per request, {tiles} tile{'s'[: tiles > 1]} in flight; one prompt's masks took "
        f"{format_bytes(report['masks_per_query'])}, the objects held "
        f"{format_bytes(report['detections_held'])}"
    )
