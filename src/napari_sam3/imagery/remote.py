"""Rasters over HTTP(S): GDAL's network layer, set up in one place, and the errors it gives.

A raster given as an ``http://`` or ``https://`` URL is read with windowed range requests by GDAL's
``/vsicurl/`` layer (rasterio turns the URL into that path): only the blocks a read needs, plus the
header. :func:`network_env` holds every GDAL option for it:

- **Only the URLs given are contacted.** ``GDAL_DISABLE_READDIR_ON_OPEN=EMPTY_DIR`` stops GDAL from
  listing the URL's "folder" and probing for side-car files (``.aux.xml``, ``.ovr``, ``.msk``);
  a remote file opens with one driver only, GeoTIFF (JPEG 2000 for ``.jp2``; :func:`remote_driver`),
  so a served VRT cannot point GDAL at other files or hosts.
- **Timeouts and retries.** ``GDAL_HTTP_TIMEOUT`` (seconds a request may take),
  ``GDAL_HTTP_CONNECTTIMEOUT``, ``GDAL_HTTP_MAX_RETRY`` / ``GDAL_HTTP_RETRY_DELAY`` (transient
  answers, 429 and 5xx, are retried with a growing delay).
- **A bounded cache.** ``CPL_VSIL_CURL_CACHE_SIZE``: the downloaded blocks GDAL keeps (per
  process), so a tile read twice (the scene's statistics, then the tile) is fetched once.

Each has a default (:data:`NETWORK_DEFAULTS`); the same variable in the environment wins, so an
analyst tunes them as for any GDAL tool. Credentials never travel on a command line: GDAL reads
``GDAL_HTTP_HEADERS``, ``GDAL_HTTP_USERPWD`` or ``GDAL_HTTP_BEARER`` from the environment, and
``~/.netrc`` (``GDAL_HTTP_NETRC``); ``NAPARI_SAM3_HTTP_TOKEN`` is a shorthand for a bearer token.
:func:`fetch_bytes` (STAC JSON) sends the same credentials with the same timeouts and retries.
"""

from __future__ import annotations

import netrc
import os
import re
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlparse

import rasterio

from napari_sam3.core.errors import Sam3Error

__all__ = [
    "NETWORK_DEFAULTS",
    "REMOTE_DRIVERS",
    "TOKEN_ENV",
    "RemoteRasterError",
    "fetch_bytes",
    "file_name",
    "is_remote",
    "remote_driver",
    "remote_error",
    "network_env",
    "network_options",
]

TOKEN_ENV = "NAPARI_SAM3_HTTP_TOKEN"
# The only drivers a remote file opens with, chosen by its extension (a COG is a GeoTIFF).
REMOTE_DRIVERS = {".jp2": "JP2OpenJPEG", ".j2k": "JP2OpenJPEG"}
REMOTE_DEFAULT_DRIVER = "GTiff"

NETWORK_DEFAULTS: dict[str, str] = {
    "GDAL_HTTP_TIMEOUT": "30",
    "GDAL_HTTP_CONNECTTIMEOUT": "10",
    "GDAL_HTTP_MAX_RETRY": "3",
    "GDAL_HTTP_RETRY_DELAY": "1",
    "CPL_VSIL_CURL_CACHE_SIZE": str(64 * 2**20),
    "GDAL_DISABLE_READDIR_ON_OPEN": "EMPTY_DIR",
    "GDAL_HTTP_MERGE_CONSECUTIVE_RANGES": "YES",
    "GDAL_HTTP_NETRC": "YES",
}
# A STAC item or catalog is JSON; anything larger is not one.
MAX_JSON_BYTES = 16 * 2**20


class RemoteRasterError(Sam3Error, ValueError):
    """A URL could not be read: not found, refused, not a raster, truncated, timed out."""


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
    token = os.environ.get(TOKEN_ENV)
    if token and not os.environ.get("GDAL_HTTP_HEADERS"):
        options["GDAL_HTTP_AUTH"] = "BEARER"
        options["GDAL_HTTP_BEARER"] = token.strip()
    return options


def network_env() -> rasterio.Env:
    """The ``rasterio.Env`` that remote opens and reads run in (thread-local in worker threads,
    so every thread that reads enters it itself)."""
    return rasterio.Env(**network_options())


# ----------------------------------------------------------------------------- errors


_GDAL_REASONS = (
    (re.compile(r"HTTP response code: 404|\b404\b"), "not found (HTTP 404); check the URL"),
    (
        re.compile(r"HTTP response code: 40[13]\b"),
        f"refused (HTTP 401/403); give credentials in the environment ({TOKEN_ENV}, "
        "GDAL_HTTP_HEADERS or GDAL_HTTP_USERPWD) or in ~/.netrc, never on the command line",
    ),
    (
        re.compile(r"timed out|Timeout was reached|timeout", re.IGNORECASE),
        "the server did not answer in time (GDAL_HTTP_TIMEOUT {timeout} s); retry later or "
        "raise GDAL_HTTP_TIMEOUT",
    ),
    (
        re.compile(r"Could not resolve|Couldn't connect|Connection refused|Failed to connect"),
        "no server answers there; check the host and port",
    ),
    (
        re.compile(r"HTTP response code: (5\d\d|429)"),
        "the server kept failing (HTTP 5xx/429) after GDAL_HTTP_MAX_RETRY retries",
    ),
    (
        re.compile(r"not recognized as (being in )?a supported file format|not a TIFF", re.I),
        "the answer is not a GeoTIFF or JPEG 2000 raster (an HTML page? a VRT? a wrong URL?)",
    ),
    (
        re.compile(r"416|Range|Read error|TIFFRead|IReadBlock|short|truncat", re.IGNORECASE),
        "the file is truncated or damaged (a block lies past its end)",
    ),
)


def remote_error(url: str, exc: BaseException, reading: str = "open") -> RemoteRasterError:
    """A clear error naming ``url`` for a GDAL/rasterio failure on it."""
    messages, seen = [], exc
    while seen is not None and len(messages) < 6:  # GDAL's own messages are the causes
        messages.append(str(seen).strip())
        seen = seen.__cause__ or seen.__context__
    text = " / ".join(dict.fromkeys(m for m in messages if m))
    reason = next((why for pattern, why in _GDAL_REASONS if pattern.search(text)), None)
    reason = (reason or "GDAL could not read it").replace(
        "{timeout}", network_options()["GDAL_HTTP_TIMEOUT"]
    )
    return RemoteRasterError(f"cannot {reading} {url}: {reason} [{text.strip()[:300]}]")


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
    """GET ``url`` (timeouts, retries with backoff for 429/5xx and dropped connections, the
    environment's credentials) and return its body, at most ``max_bytes``."""
    options = network_options()
    timeout = float(options["GDAL_HTTP_TIMEOUT"])
    retries = max(0, int(options["GDAL_HTTP_MAX_RETRY"]))
    delay = float(options["GDAL_HTTP_RETRY_DELAY"])
    request = urllib.request.Request(url, headers=request_headers(url))
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:  # noqa: S310
                body = answer.read(max_bytes + 1)
                length = answer.headers.get("Content-Length")
            if len(body) > max_bytes:
                raise RemoteRasterError(
                    f"{url} is larger than {max_bytes // 2**20} MiB: not a STAC item or catalog"
                )
            if length is not None and length.isdigit() and int(length) != len(body):
                raise RemoteRasterError(
                    f"{url} was cut short ({len(body)} of {length} bytes); retry later"
                )
            return body
        except urllib.error.HTTPError as error:
            transient = error.code == 429 or error.code >= 500
            if not transient or attempt == retries:
                raise RemoteRasterError(f"cannot fetch {url}: {_http_reason(error.code)}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            if attempt == retries:
                raise RemoteRasterError(
                    f"cannot fetch {url}: {_network_reason(reason, timeout)}"
                ) from None
        time.sleep(delay * 2**attempt)
    raise AssertionError("unreachable")


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
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return f"the server did not answer within {timeout:g} s (GDAL_HTTP_TIMEOUT)"
    return f"no answer ({reason}); check the host and port"
