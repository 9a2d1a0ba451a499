"""STAC API search: the items of a catalog query, as scenes.

:func:`search_items` asks a STAC API (Earth Search, Planetary Computer, an agency's catalog) for
the items of some collections in an area (``bbox``, longitude/latitude), a time range
(``datetime``) and a CQL2 text ``filter`` ("eo:cloud_cover<20"), with pystac-client. Each item
found is a scene as any STAC item is (:mod:`napari_sam3.imagery.stac` picks its RGB assets).

The requests follow the network rules of :mod:`napari_sam3.imagery.remote`: the environment's
credentials (:func:`~napari_sam3.imagery.remote.request_headers`, per host: a ``next`` page on
another host never gets this host's netrc password), ``GDAL_HTTP_CONNECTTIMEOUT`` /
``GDAL_HTTP_TIMEOUT`` (the whole answer within it), ``GDAL_HTTP_MAX_RETRY`` retries after 429/5xx
or a dropped connection, waiting ``GDAL_HTTP_RETRY_DELAY`` doubling (or a ``Retry-After``, up to
the deadline of one request), and a page of at most
:data:`~napari_sam3.imagery.remote.MAX_JSON_BYTES`. A search is bounded: at most
:data:`DEFAULT_MAX_ITEMS` items unless ``max_items`` says otherwise (a search that finds more,
or whose pages never end, is refused with what to narrow), so no query runs away.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from napari_sam3.core.errors import InvalidInput, Sam3Error
from napari_sam3.imagery.placement import crosses_antimeridian
from napari_sam3.imagery.remote import (
    MAX_JSON_BYTES,
    TRANSIENT_CODES,
    RemoteRasterError,
    RemoteTimedOut,
    RemoteUnavailable,
    deadline,
    network_options,
    request_headers,
)
from napari_sam3.imagery.stac import LoadedItem, StacError

__all__ = [
    "DEFAULT_MAX_ITEMS",
    "SearchResult",
    "StacSearchError",
    "cloud_cover",
    "search_items",
]

# Scenes a search may return unless max_items says otherwise: each is minutes to hours of work.
DEFAULT_MAX_ITEMS = 200


class StacSearchError(StacError):
    """A search that cannot be made: not a STAC API, no item search, a filter it cannot take."""


@dataclass(frozen=True)
class SearchResult:
    """The items a search found (pystac Items, in the API's order), each a
    :class:`~napari_sam3.imagery.stac.LoadedItem` too (``scenes``), and whether ``max_items``
    stopped it before the last match."""

    url: str
    items: tuple[Any, ...]
    truncated: bool = False

    @property
    def scenes(self) -> list[LoadedItem]:
        """The items as scenes: each a string (its URL) that reads as the item itself."""
        return [LoadedItem.of(item, self.url) for item in self.items]

    def listing(self) -> list[str]:
        """One line per item: id, date, cloud cover."""
        width = max((len(i.id) for i in self.items), default=0)
        lines = []
        for item in self.items:
            when = item.datetime or item.common_metadata.start_datetime
            date = when.strftime("%Y-%m-%d %H:%M") if when else "no date"
            cover = cloud_cover(item)
            cloud = f"cloud {cover:.0f}%" if cover is not None else "cloud n/a"
            lines.append(f"{item.id:<{width}}  {date}  {cloud}")
        return lines

    def __len__(self) -> int:
        return len(self.items)


def cloud_cover(item: Any) -> float | None:
    """The item's ``eo:cloud_cover`` (percent), or None."""
    value = item.properties.get("eo:cloud_cover")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def search_items(
    url: str,
    collections: str | Sequence[str],
    bbox: Sequence[float] | None = None,
    datetime: str | None = None,
    filter: str | None = None,  # noqa: A002 - the STAC API's own name
    max_items: int | None = None,
    limit: int | None = None,
) -> SearchResult:
    """The items of ``collections`` at the STAC API ``url`` that match.

    Args:
        url: the API's landing page (``https://earth-search.aws.element84.com/v1``).
        collections: one collection id, "a,b", or a list.
        bbox: (west, south, east, north) in longitude/latitude (the STAC API's CRS).
        datetime: an instant or a range, RFC 3339 or shortened: ``2024-06/2024-08``,
            ``2024-06-01/..``.
        filter: CQL2 text, e.g. ``eo:cloud_cover<20``; refused when the API does not declare
            the Filter extension (it would ignore it or answer wrongly).
        max_items: at most this many items; more matching is said in ``truncated``. Without it,
            a search finding more than :data:`DEFAULT_MAX_ITEMS` is refused.
        limit: items per page asked of the server (default: the server's own).
    """
    from pystac_client import Client
    from pystac_client.conformance import ConformanceClasses

    names = _collections(collections)
    bounded = max_items is None
    cap = DEFAULT_MAX_ITEMS if bounded else _positive("max_items", max_items)
    if limit is not None:
        _positive("limit", limit)
    box, when = _bbox(bbox), _datetime(datetime)
    with _errors(url):
        client = Client.open(url, **_client_options())
        if not client.conforms_to(ConformanceClasses.ITEM_SEARCH) or not client.get_search_link():
            raise StacSearchError(
                f"{url} is not a STAC API with item search (no item-search conformance class "
                "or 'search' link); a static catalog or collection is given as a RASTER "
                "(its catalog.json), not to --stac"
            )
        if filter is not None and not client.conforms_to(ConformanceClasses.FILTER):
            raise StacSearchError(
                f"the STAC API at {url} does not declare the Filter extension (CQL2), so it "
                "would ignore or misread the filter; leave --filter out and narrow the search "
                "by --bbox and --datetime"
            )
        methods = {
            (link.extra_fields.get("method") or "GET").upper()
            for link in client.links
            if link.rel == "search"
        }
        search = client.search(
            method="POST" if "POST" in methods else "GET",  # what the API says it takes
            collections=names,
            **_area(box),
            datetime=when,
            filter=filter,
            filter_lang="cql2-text" if filter is not None else None,
            max_items=cap + 1,
            limit=limit,
        )
        found = []
        for item in search.items():
            found.append(item)
    truncated = len(found) > cap
    if truncated and bounded:
        raise InvalidInput(
            f"the search at {url} finds more than {cap} items (or its pages do not end); "
            "narrow it (--bbox, --datetime, --filter) or say how many to take with --max-items"
        )
    return SearchResult(url, tuple(found[:cap]), truncated)


# ----------------------------------------------------------------------------- checks


def _collections(collections: str | Sequence[str]) -> list[str]:
    items = collections.split(",") if isinstance(collections, str) else list(collections or [])
    names = [str(c).strip() for c in items if str(c).strip()]
    if not names:
        raise InvalidInput(
            "a STAC API search needs the collections to search (--collections), e.g. "
            "sentinel-2-l2a; the API lists its own at URL/collections"
        )
    return names


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{name} must be a whole number of 1 or more, got {value!r}")
    return value


def _bbox(bbox: Sequence[float] | None) -> list[float] | None:
    if bbox is None:
        return None
    try:
        box = [float(v) for v in bbox]
    except (TypeError, ValueError):
        raise InvalidInput(
            f"a search bbox is four numbers west,south,east,north, got {bbox!r}"
        ) from None
    if len(box) != 4 or not (
        all(-180 <= x <= 180 for x in box[::2]) and -90 <= box[1] < box[3] <= 90
    ):
        raise InvalidInput(
            f"a search bbox is west,south,east,north in longitude/latitude, got {bbox!r}"
        )
    if box[0] == box[2] or (box[0] > box[2] and not crosses_antimeridian(box[0], box[2])):
        raise InvalidInput(f"a search bbox needs west and east apart, got {bbox!r}")
    return box


def _area(box: list[float] | None) -> dict[str, Any]:
    """The search's area parameter: the bbox, or where it crosses the antimeridian, the two
    boxes either side of it as one MultiPolygon (`intersects`, part of item search's core like
    bbox): servers differ on how they read a bbox whose west is above its east."""
    if box is None or box[0] < box[2]:
        return {"bbox": box}
    west, south, east, north = box
    sides = [(west, 180.0), (-180.0, east)]
    rings = [[[[w, south], [e, south], [e, north], [w, north], [w, south]]] for w, e in sides]
    return {"intersects": {"type": "MultiPolygon", "coordinates": rings}}


def _datetime(text: str | None) -> str | None:
    """The range as pystac-client expands it (``2024-06/2024-08``: June 1 to August 31), checked
    here so a typo is named before any request."""
    if text is None:
        return None
    from pystac_client.item_search import ItemSearch

    try:  # pystac-client's own parser, on no server: nothing is sent
        return ItemSearch("http://127.0.0.1/search", datetime=text).get_parameters()["datetime"]
    except Exception as error:  # noqa: BLE001 - it raises bare Exception for a bad part
        raise InvalidInput(
            f"--datetime {text!r}: give a date or a range, e.g. 2024-06-01, 2024-06/2024-08 or "
            f"2024-06-01/.. ({error})"
        ) from None


# ----------------------------------------------------------------------------- network


def _client_options() -> dict[str, Any]:
    """Client.open's arguments: a StacApiIO with our network rules (see the module's
    docstring). The timeout and request modifier go to Client.open itself, which sets them on
    the StacApiIO (and would set None over any given to the StacApiIO alone)."""
    from pystac_client.stac_api_io import StacApiIO

    options = network_options()
    timeout = float(options["GDAL_HTTP_TIMEOUT"])
    connect = float(options["GDAL_HTTP_CONNECTTIMEOUT"])
    retries = int(options["GDAL_HTTP_MAX_RETRY"])
    retry = _Retry(
        total=retries,
        connect=retries,
        read=retries,
        status=retries,
        backoff_factor=float(options["GDAL_HTTP_RETRY_DELAY"]),
        status_forcelist=sorted(TRANSIENT_CODES),
        allowed_methods=None,  # a search POST changes nothing: retried as a GET is
        raise_on_status=False,  # the last answer's status is the error's
    )
    io = StacApiIO(max_retries=None)
    adapter = _BoundedAdapter(timeout, max_retries=retry)
    io.session.mount("http://", adapter)
    io.session.mount("https://", adapter)
    io.session.auth = _no_auth  # credentials are request_headers' alone (requests would add
    # ~/.netrc's for any host, over a token given in the environment)
    return {"stac_io": io, "timeout": (connect, timeout), "request_modifier": _with_credentials}


def _retry_base() -> type:
    from urllib3.util.retry import Retry

    return Retry


class _Retry(_retry_base()):  # type: ignore[misc]
    """urllib3's retries, a server's ``Retry-After`` honoured up to the deadline of one request
    (:func:`~napari_sam3.imagery.remote.deadline`): a server asking for an hour is not waited on."""

    def get_retry_after(self, response: Any) -> float | None:
        asked = super().get_retry_after(response)
        return None if asked is None else min(asked, deadline())


def _with_credentials(request: Any) -> Any:
    request.headers = {**request_headers(request.url), **(request.headers or {})}
    return request


def _no_auth(request: Any) -> Any:
    return request


def _adapter_base() -> type:
    from requests.adapters import HTTPAdapter

    return HTTPAdapter


class _BoundedAdapter(_adapter_base()):  # type: ignore[misc]
    """requests' adapter, reading each answer whole within GDAL_HTTP_TIMEOUT and at most
    MAX_JSON_BYTES: a page that never ends, or trickles, is given up on."""

    def __init__(self, timeout: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = timeout

    def send(self, request: Any, **kwargs: Any) -> Any:
        kwargs["stream"] = True
        response = super().send(request, **kwargs)
        stop = time.monotonic() + self.limit
        body = bytearray()
        try:
            for chunk in response.iter_content(65536):
                body += chunk
                if len(body) > MAX_JSON_BYTES:
                    raise StacSearchError(
                        f"{request.url} answered more than {MAX_JSON_BYTES // 2**20} MiB: not a "
                        "page of STAC items (a page that never ends?)"
                    )
                if time.monotonic() > stop:
                    raise RemoteTimedOut(
                        f"cannot fetch {request.url}: the server did not send its answer within "
                        f"{self.limit:g} s (GDAL_HTTP_TIMEOUT; {len(body)} bytes came)"
                    )
        finally:
            response.close()
        response._content = bytes(body)  # noqa: SLF001 - requests' own slot for a read body
        return response


class _errors:  # noqa: N801 - used as `with _errors(url):`
    """pystac-client's and pystac's failures as our errors, each naming the URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: BaseException | None, tb: Any) -> bool:
        if error is None or isinstance(error, Sam3Error):
            return False
        ours = _ours(error)
        if ours is not None:
            raise ours from None
        raise _translate(self.url, error) from None


def _ours(error: BaseException) -> Sam3Error | None:
    """Our own error among what pystac-client wrapped (it re-raises any as APIError(str))."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return None
        if isinstance(seen, Sam3Error):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _translate(url: str, error: BaseException) -> Sam3Error:
    from pystac_client.exceptions import APIError

    if isinstance(error, APIError):
        status = getattr(error, "status_code", None)
        text = " ".join(str(error).split())[:300]
        if status in TRANSIENT_CODES:
            return RemoteUnavailable(
                f"cannot search {url}: the server answered HTTP {status} after "
                f"GDAL_HTTP_MAX_RETRY retries; retry later [{text}]"
            )
        if status in (401, 403):
            return RemoteRasterError(
                f"cannot search {url}: refused (HTTP {status}); give credentials in the "
                "environment (NAPARI_SAM3_HTTP_TOKEN, GDAL_HTTP_HEADERS or GDAL_HTTP_USERPWD) or "
                "in ~/.netrc, never on the command line"
            )
        if status is not None:
            return StacSearchError(
                f"cannot search {url}: the server answered HTTP {status} (is it a STAC API, "
                f"and are the collections, bbox, datetime and filter right?) [{text}]"
            )
        if "timed out" in text.lower() or "timeout" in text.lower():
            return RemoteTimedOut(
                f"cannot search {url}: the server did not answer within GDAL_HTTP_TIMEOUT "
                f"({network_options()['GDAL_HTTP_TIMEOUT']} s); retry later or raise it [{text}]"
            )
        return RemoteUnavailable(
            f"cannot search {url}: no answer after GDAL_HTTP_MAX_RETRY retries; check the host "
            f"and port [{text}]"
        )
    return StacSearchError(
        f"{url} did not answer as a STAC API ({type(error).__name__}: "
        f"{' '.join(str(error).split())[:200]}); give the API's landing page URL"
    )
