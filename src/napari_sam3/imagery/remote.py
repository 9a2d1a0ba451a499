"""Rasters over HTTP(S): GDAL's network layer, set up in one place, and the errors it gives.

A raster given as an ``http://`` or ``https://`` URL is read with windowed range requests by GDAL's
``/vsicurl/`` layer (rasterio turns the URL into that path): only the blocks a read needs, plus the
header. :func:`network_env` holds every GDAL option for it:

- **Only the URLs given are contacted.** ``GDAL_DISABLE_READDIR_ON_OPEN=EMPTY_DIR`` stops GDAL from
  listing the URL's "folder" and probing for side-car files (``.aux.xml``, ``.ovr``, ``.msk``);
  a remote file opens with one driver only, GeoTIFF (JPEG 2000 for ``.jp2``; :func:`remote_driver`),
  so a served VRT cannot point GDAL at other files or hosts.
- **Timeouts and retries.** ``GDAL_HTTP_TIMEOUT`` (seconds a request may take),
  ``GDAL_HTTP_CONNECTTIMEOUT``, ``GDAL_HTTP_LOW_SPEED_TIME`` / ``GDAL_HTTP_LOW_SPEED_LIMIT`` (a
  server that stalls or trickles is given up on), ``GDAL_HTTP_MAX_RETRY`` /
  ``GDAL_HTTP_RETRY_DELAY`` / ``GDAL_HTTP_RETRY_CODES`` (transient answers, 429 and 5xx, are
  retried by GDAL with a growing delay). A body cut short (a connection reset, a 206 shorter than
  asked, a stall mid-body) GDAL does not retry, and it keeps the short part in its cache, where
  every later read of that block in this process would fail again: :func:`retried` drops the
  URL's cached blocks and reads once more (:data:`READ_TRIES`). A block that still cannot be read
  whole fails the read with an error naming the URL: never zeros in its place.
- **A deadline.** :func:`deadline`: all tries of one request together, the longest GDAL's own
  retries take; nothing here waits past it (a ``Retry-After`` beyond it fails at once).
- **A bounded cache.** ``CPL_VSIL_CURL_CACHE_SIZE``: the downloaded blocks GDAL keeps (per
  process), so a tile read twice (the scene's statistics, then the tile) is fetched once.

Each has a default (:data:`NETWORK_DEFAULTS`); the same variable in the environment wins, so an
analyst tunes them as for any GDAL tool. Credentials never travel on a command line: GDAL reads
``GDAL_HTTP_HEADERS``, ``GDAL_HTTP_USERPWD`` or ``GDAL_HTTP_BEARER`` from the environment, and
``~/.netrc`` (``GDAL_HTTP_NETRC``); ``NAPARI_SAM3_HTTP_TOKEN`` is a shorthand for a bearer token.
:func:`fetch_bytes` (STAC JSON) sends the same credentials with the same timeouts and retries.
"""

from __future__ import annotations

import http.client
import logging
import netrc
import os
import re
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable
from contextvars import ContextVar
from email.utils import parsedate_to_datetime
from pathlib import PurePosixPath
from typing import Any, TypeVar
from urllib.parse import urlparse

import rasterio
from rasterio.errors import RasterioError

from napari_sam3.core.errors import ConnectionFailed, Sam3Error, TimedOut

__all__ = [
    "NETWORK_DEFAULTS",
    "REMOTE_DRIVERS",
    "TOKEN_ENV",
    "READ_TRIES",
    "RemoteRasterError",
    "RemoteTimedOut",
    "RemoteUnavailable",
    "deadline",
    "fetch_bytes",
    "fetch_validators",
    "forget",
    "file_name",
    "is_remote",
    "remote_driver",
    "remote_error",
    "network_env",
    "network_options",
    "retried",
]

TOKEN_ENV = "NAPARI_SAM3_HTTP_TOKEN"
# The only drivers a remote file opens with, chosen by its extension (a COG is a GeoTIFF).
REMOTE_DRIVERS = {".jp2": "JP2OpenJPEG", ".j2k": "JP2OpenJPEG"}
REMOTE_DEFAULT_DRIVER = "GTiff"

NETWORK_DEFAULTS: dict[str, str] = {
    "GDAL_HTTP_TIMEOUT": "30",
    "GDAL_HTTP_CONNECTTIMEOUT": "10",
    "GDAL_HTTP_LOW_SPEED_TIME": "15",  # below GDAL_HTTP_LOW_SPEED_LIMIT bytes/s this long:
    "GDAL_HTTP_LOW_SPEED_LIMIT": "1024",  # a stalled answer, given up on (and retried)
    "GDAL_HTTP_MAX_RETRY": "3",
    "GDAL_HTTP_RETRY_DELAY": "1",
    "GDAL_HTTP_RETRY_CODES": "429,500,502,503,504",  # GDAL >= 3.10; older ones ignore it
    "CPL_VSIL_CURL_CACHE_SIZE": str(64 * 2**20),
    "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",
    "GDAL_HTTP_MERGE_CONSECUTIVE_RANGES": "YES",
    "GDAL_HTTP_NETRC": "YES",
}
# A STAC item or catalog is JSON; anything larger is not one.
MAX_JSON_BYTES = 16 * 2**20
# Reads of a remote raster after GDAL's own retries: the first, and one after its cache is dropped.
READ_TRIES = 2
# Answers worth another try: the server is busy or failing for now.
TRANSIENT_CODES = frozenset({429, 500, 502, 503, 504})

T = TypeVar("T")
# The retries a read's last try may still make within its deadline (set by `retried`).
_LEFT: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("napari_sam3_http_left", default=())


class RemoteRasterError(Sam3Error, ValueError):
    """A URL could not be read: not found, refused, not a raster, truncated, timed out."""


class RemoteUnavailable(RemoteRasterError, ConnectionFailed):
    """No answer, or no whole answer, within the retries: the server failed, refused the
    connection, kept answering 5xx/429, or cut its answers short."""


class RemoteTimedOut(RemoteRasterError, TimedOut):
    """The server did not answer, or not in full, within the time given."""


def is_remote(source: Any) -> bool:
    """Whether ``source`` (a str or path) names a file on an HTTP(S) server."""
    if not isinstance(source, str | os.PathLike):
        return False
    text = os.fspath(source)
    return isinstance(text, str) and text.lower().startswith(("http://", "https://", "/vsicurl/"))


def file_name(source: Any) -> str:
    """The file name of a path or URL (a URL's query string left out)."""
    text = os.fspath(source)
    if is_remote(text):
        return PurePosixPath(urlparse(text.removeprefix("/vsicurl/")).path).name or text
    return PurePosixPath(text.replace("\\", "/")).name


def remote_driver(url: str) -> str:
    """The one GDAL driver a remote file may open with: never a VRT that could point elsewhere."""
    return REMOTE_DRIVERS.get(PurePosixPath(file_name(url)).suffix.lower(), REMOTE_DEFAULT_DRIVER)


def network_options() -> dict[str, str]:
    """The GDAL options of every remote read: :data:`NETWORK_DEFAULTS`, each overridden by the
    environment variable of the same name, and a bearer token from :data:`TOKEN_ENV`."""
    options = {key: os.environ.get(key, value) for key, value in NETWORK_DEFAULTS.items()}
    options.update(dict(_LEFT.get()))
    token = os.environ.get(TOKEN_ENV)
    if token and not os.environ.get("GDAL_HTTP_HEADERS"):
        options["GDAL_HTTP_AUTH"] = "BEARER"
        options["GDAL_HTTP_BEARER"] = token.strip()
    return options


def network_env() -> rasterio.Env:
    """The ``rasterio.Env`` that remote opens and reads run in (thread-local in worker threads,
    so every thread that reads enters it itself)."""
    return rasterio.Env(**network_options())


def deadline(options: dict[str, str] | None = None) -> float:
    """Seconds all tries of one request may take together: ``1 + GDAL_HTTP_MAX_RETRY`` tries of
    ``GDAL_HTTP_TIMEOUT`` each, and the delays between them (doubling from
    ``GDAL_HTTP_RETRY_DELAY``, as GDAL's do)."""
    options = options or network_options()
    timeout, retries, delay = _retry_settings(options)
    return (retries + 1) * timeout + delay * (2**retries - 1)


def _retry_settings(options: dict[str, str]) -> tuple[float, int, float]:
    """GDAL_HTTP_TIMEOUT, GDAL_HTTP_MAX_RETRY, GDAL_HTTP_RETRY_DELAY as numbers; a value that is
    not one is refused naming the variable."""
    values = []
    for key, kind in (
        ("GDAL_HTTP_TIMEOUT", float),
        ("GDAL_HTTP_MAX_RETRY", int),
        ("GDAL_HTTP_RETRY_DELAY", float),
    ):
        try:
            value = kind(options[key])
        except ValueError:
            raise RemoteRasterError(
                f"{key}={options[key]!r} in the environment is not a number; unset or fix it"
            ) from None
        values.append(max(value, 0))
    timeout, retries, delay = values
    return max(timeout, 0.1), int(retries), delay


# ----------------------------------------------------------------------------- GDAL reads


def forget(url: str) -> None:
    """Drop what GDAL keeps of ``url`` in this process (its blocks, its size): a read after a
    failed one asks the server again instead of failing on a short block GDAL cached. GDAL drops
    a file's cache when a handle of it opened under ``CPL_VSIL_CURL_NON_CACHED`` closes, whether
    or not the open succeeded; at most 0.1 s, so a stalled server costs nothing more here."""
    with (
        network_env(),
        rasterio.Env(
            CPL_VSIL_CURL_NON_CACHED="/vsicurl/" + url.removeprefix("/vsicurl/"),
            GDAL_HTTP_TIMEOUT="0.1",  # its answer is not needed: the handle's close drops
            GDAL_HTTP_MAX_RETRY="0",  # the cache even when the open fails
        ),
    ):
        try:
            rasterio.open(url, driver=remote_driver(url)).close()
        except RasterioError:  # nothing (whole) to keep, then
            pass


def retried(url: str, action: Callable[[], T], reading: str = "open", discard=None) -> T:
    """``action()``, a GDAL open or read of ``url`` (GDAL has retried 429/5xx and stalls itself),
    tried once more after a failure that may pass (a body cut short, a server that kept
    failing): ``discard()`` (the caller's handles of it) and :func:`forget` first. Both tries
    together stay within :func:`deadline`: the second makes only the retries that fit, and is not
    made when not one try fits. The first failure is raised, as :func:`remote_error` gives it
    (a second one is often its echo: a header cut short after a block was)."""
    options = network_options()
    timeout, _, delay = _retry_settings(options)
    end = time.monotonic() + deadline(options)
    token, first = None, None
    try:
        for attempt in range(READ_TRIES):
            _WARNINGS.take(url)  # this try's warnings only
            try:
                return action()
            except RasterioError as exc:
                error = remote_error(url, exc, reading)
                first = first or error  # what the retry could not get past: the cause
                if discard is not None:
                    discard()
                forget(url)
                fit = int((end - time.monotonic() - delay) // timeout)
                last = attempt + 1 == READ_TRIES
                if last or fit < 1 or not isinstance(error, RemoteUnavailable):
                    raise first from None
            time.sleep(delay)
            retries = min(fit - 1, _retry_settings(options)[1])
            token = _LEFT.set((("GDAL_HTTP_MAX_RETRY", str(retries)),))
    finally:
        if token is not None:
            _LEFT.reset(token)
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------- errors


class _NetworkWarnings(logging.Handler):
    """The last network warning GDAL gave for each URL ("HTTP error code: 503 - URL. Retrying"):
    a failed block read names only the block, so :func:`remote_error` adds this as the cause."""

    pattern = re.compile(r"HTTP (?:error|response) code: \d+ - (\S+?)\.? ")
    keep = 64

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            return
        match = self.pattern.search(message)
        if match:  # (emit runs under self.lock)
            self.last.pop(match.group(1), None)
            self.last[match.group(1)] = message
            while len(self.last) > self.keep:
                self.last.pop(next(iter(self.last)))

    def take(self, url: str) -> str | None:
        """The last warning about ``url``, forgotten now."""
        with self.lock:
            return self.last.pop(url.removeprefix("/vsicurl/"), None)


_WARNINGS = _NetworkWarnings()
logging.getLogger("rasterio").addHandler(_WARNINGS)


_GDAL_REASONS = (
    (
        re.compile(r"HTTP response code: 404|\b404\b"),
        RemoteRasterError,
        "not found (HTTP 404); check the URL",
    ),
    (
        re.compile(r"HTTP response code: 40[13]\b"),
        RemoteRasterError,
        f"refused (HTTP 401/403); give credentials in the environment ({TOKEN_ENV}, "
        "GDAL_HTTP_HEADERS or GDAL_HTTP_USERPWD) or in ~/.netrc, never on the command line",
    ),
    (
        re.compile(r"timed out|Timeout was reached|timeout", re.IGNORECASE),
        RemoteTimedOut,
        "the server did not answer in time (GDAL_HTTP_TIMEOUT {timeout} s); retry later or "
        "raise GDAL_HTTP_TIMEOUT",
    ),
    (
        re.compile(r"Could not resolve|Couldn't connect|Connection refused|Failed to connect"),
        RemoteUnavailable,
        "no server answers there; check the host and port",
    ),
    (
        re.compile(r"HTTP (response|error) code: (5\d\d|429)"),
        RemoteUnavailable,
        "the server kept failing (HTTP 5xx/429) after GDAL_HTTP_MAX_RETRY retries",
    ),
    (
        re.compile(r"not recognized as (being in )?a supported file format|not a TIFF", re.I),
        RemoteUnavailable,  # also what a header cut short looks like: worth one more try
        "the answer is not a GeoTIFF or JPEG 2000 raster (an HTML page? a VRT? a wrong URL?), "
        "or the server cut its answers short",
    ),
    (
        re.compile(r"416|Range|Read error|TIFFRead|IReadBlock|short|truncat", re.IGNORECASE),
        RemoteUnavailable,
        "a block could not be read whole: the file is truncated or damaged, or the server cut "
        "its answers short (a reset, a stall, an error); retry later if the file is sound",
    ),
)


def remote_error(url: str, exc: BaseException, reading: str = "open") -> RemoteRasterError:
    """A clear error naming ``url`` for a GDAL/rasterio failure on it: a
    :class:`RemoteTimedOut` or :class:`RemoteUnavailable` where the network may be the cause."""
    messages, seen = [], exc
    while seen is not None and len(messages) < 6:  # GDAL's own messages are the causes
        messages.append(str(seen).strip())
        seen = seen.__cause__ or seen.__context__
    warned = _WARNINGS.take(url)
    if warned:  # GDAL's last word on the URL, before the read error it led to
        messages.insert(0, warned.removeprefix("CPLE_AppDefined:").strip())
    text = " / ".join(dict.fromkeys(m for m in messages if m))
    kind, reason = next(
        ((cls, why) for pattern, cls, why in _GDAL_REASONS if pattern.search(text)),
        (RemoteRasterError, "GDAL could not read it"),
    )
    reason = reason.replace("{timeout}", network_options()["GDAL_HTTP_TIMEOUT"])
    return kind(f"cannot {reading} {url}: {reason} [{text.strip()[:300]}]")


# ----------------------------------------------------------------------------- JSON over HTTP


def request_headers(url: str) -> dict[str, str]:
    """The credentials GDAL would send to ``url``, for our own requests (STAC JSON)."""
    headers = {"User-Agent": "napari-sam3"}
    given = os.environ.get("GDAL_HTTP_HEADERS")
    if given:
        for line in re.split(r"\r?\n", given):
            name, sep, value = line.partition(":")
            if sep and name.strip():
                headers[name.strip()] = value.strip()
        return headers
    token = os.environ.get(TOKEN_ENV) or os.environ.get("GDAL_HTTP_BEARER")
    if token:
        headers["Authorization"] = f"Bearer {token.strip()}"
        return headers
    userpwd = os.environ.get("GDAL_HTTP_USERPWD")
    if not userpwd and os.environ.get("GDAL_HTTP_NETRC", "YES").upper() not in ("NO", "FALSE"):
        userpwd = _netrc_userpwd(urlparse(url).hostname or "")
    if userpwd:
        headers["Authorization"] = "Basic " + b64encode(userpwd.encode()).decode()
    return headers


def _netrc_userpwd(host: str) -> str | None:
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        entry = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    if not entry:
        return None
    login, _, password = entry
    return f"{login}:{password or ''}"


def fetch_bytes(url: str, max_bytes: int = MAX_JSON_BYTES) -> bytes:
    """GET ``url`` with the environment's credentials and return its body, at most ``max_bytes``
    (the rules of one request: :func:`_request`)."""
    return _request(url, max_bytes, "GET")[0]


def fetch_validators(url: str) -> dict[str, str]:
    """What the server says identifies ``url``'s content now, from one HEAD request with the
    rules of :func:`fetch_bytes`: ``etag``, ``last_modified`` and ``size`` (those it gives)."""
    headers = _request(url, 0, "HEAD")[1]
    found = {
        "etag": headers.get("ETag"),
        "last_modified": headers.get("Last-Modified"),
        "size": headers.get("Content-Length"),
    }
    return {key: value for key, value in found.items() if value}


def _request(url: str, max_bytes: int, method: str) -> tuple[bytes, Any]:
    """One request of ``url`` with the environment's credentials: (its body, at most
    ``max_bytes``; its headers).

    GDAL's rules for one request: each try within ``GDAL_HTTP_TIMEOUT`` (the whole body, so a
    trickle is given up on too), up to ``GDAL_HTTP_MAX_RETRY`` more tries after 429/5xx, a
    dropped connection or a body cut short, waiting ``GDAL_HTTP_RETRY_DELAY`` doubling, or the
    server's ``Retry-After`` if longer; all within :func:`deadline`, else a clear error now.
    """
    options = network_options()
    timeout, retries, delay = _retry_settings(options)
    end = time.monotonic() + deadline(options)
    request = urllib.request.Request(url, headers=request_headers(url), method=method)
    for attempt in range(retries + 1):
        wait = delay * 2**attempt
        try:
            left = min(timeout, end - time.monotonic())
            return _fetch_once(request, url, left, max_bytes, timeout)
        except urllib.error.HTTPError as error:
            if error.code not in TRANSIENT_CODES:
                raise RemoteRasterError(f"cannot fetch {url}: {_http_reason(error.code)}") from None
            asked = _retry_after(error.headers)
            failure: RemoteRasterError = RemoteUnavailable(
                f"cannot fetch {url}: the server answered HTTP {error.code}"
                + (f" (Retry-After {asked:g} s)" if asked is not None else "")
                + f" {attempt + 1} time(s); retry later"
            )
            wait = max(wait, asked or 0.0)
        except _CutShort as error:
            kind = RemoteTimedOut if error.timed_out else RemoteUnavailable
            failure = kind(f"cannot fetch {url}: {error}; retry later")
        except (
            TimeoutError,
            urllib.error.URLError,
            ConnectionError,
            http.client.HTTPException,
        ) as error:
            reason = getattr(error, "reason", error)
            kind = RemoteTimedOut if _timed_out(reason) else RemoteUnavailable
            failure = kind(f"cannot fetch {url}: {_network_reason(reason, timeout)}")
        if attempt == retries:
            raise failure from None
        if time.monotonic() + wait > end:
            raise type(failure)(
                f"{failure} (no time for another try within the deadline of "
                f"{deadline(options):g} s: GDAL_HTTP_TIMEOUT x tries)"
            ) from None
        time.sleep(wait)
    raise AssertionError("unreachable")


class _CutShort(Exception):  # noqa: N818 - internal: a body that ended early, retried
    def __init__(self, message: str, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


def _fetch_once(
    request: urllib.request.Request, url: str, timeout: float, max_bytes: int, limit: float
) -> tuple[bytes, Any]:
    """One GET, its whole body within ``timeout`` seconds (``limit``: GDAL_HTTP_TIMEOUT)."""
    stop = time.monotonic() + max(timeout, 0.1)
    with urllib.request.urlopen(request, timeout=max(timeout, 0.1)) as answer:  # noqa: S310
        length = answer.headers.get("Content-Length")
        if request.get_method() == "HEAD":  # no body: its length is the file's
            return b"", answer.headers
        body = bytearray()
        while len(body) <= max_bytes:
            chunk = answer.read1(65536)  # one receive: a trickle cannot hold us past `stop`
            if not chunk:
                break
            body += chunk
            if time.monotonic() > stop:
                raise _CutShort(
                    f"the server did not send its answer within {limit:g} s "
                    f"(GDAL_HTTP_TIMEOUT; {len(body)} bytes came)",
                    timed_out=True,
                )
    if len(body) > max_bytes:
        raise RemoteRasterError(
            f"{url} is larger than {max_bytes // 2**20} MiB: not a STAC item or catalog"
        )
    if length is not None and length.isdigit() and int(length) != len(body):
        raise _CutShort(f"the answer was cut short ({len(body)} of {length} bytes)")
    return bytes(body), answer.headers


def _retry_after(headers: Any) -> float | None:
    """The seconds a ``Retry-After`` header asks for (a number, or an HTTP date), if any."""
    value = (headers or {}).get("Retry-After")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _timed_out(reason: Any) -> bool:
    return isinstance(reason, TimeoutError) or "timed out" in str(reason)


def _http_reason(code: int) -> str:
    if code == 404:
        return "not found (HTTP 404); check the URL"
    if code in (401, 403):
        return (
            f"refused (HTTP {code}); give credentials in the environment ({TOKEN_ENV}, "
            "GDAL_HTTP_HEADERS or GDAL_HTTP_USERPWD) or in ~/.netrc, never on the command line"
        )
    return f"the server answered HTTP {code}"


def _network_reason(reason: Any, timeout: float) -> str:
    if _timed_out(reason):
        return f"the server did not answer within {timeout:g} s (GDAL_HTTP_TIMEOUT)"
    if isinstance(reason, ConnectionResetError | http.client.HTTPException):
        return f"the server dropped the connection mid-answer ({reason}); retry later"
    return f"no answer ({reason}); check the host and port"
