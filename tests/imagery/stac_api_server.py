"""A real STAC API on loopback for the search tests: rustac's server (``rustac serve``, its
in-memory backend) started as a child process with a collection and items written to files."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from .._required import require


def rustac_binary() -> str:
    require("rustac", 'python -m pip install -e ".[test]" (the test extra installs rustac)')
    found = shutil.which("rustac", path=str(Path(sys.executable).parent)) or shutil.which("rustac")
    assert found, "rustac is importable but its `rustac` command is not beside python"
    return found


def collection(collection_id: str) -> dict:
    return {
        "type": "Collection",
        "stac_version": "1.0.0",
        "id": collection_id,
        "description": "test scenes",
        "license": "other",
        "extent": {
            "spatial": {"bbox": [[-180, -90, 180, 90]]},
            "temporal": {"interval": [["2000-01-01T00:00:00Z", None]]},
        },
        "links": [],
    }


class StacApiServer:
    """``rustac serve`` of ``items`` (item dicts) in ``collection_id``, at :attr:`url`."""

    def __init__(self, folder: Path, items: list[dict], collection_id: str = "demo") -> None:
        self.folder = Path(folder)
        self.items = items
        self.collection_id = collection_id
        self.url = ""
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> StacApiServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "collection.json").write_text(json.dumps(collection(self.collection_id)))
        features = {"type": "FeatureCollection", "features": self.items}
        (self.folder / "items.json").write_text(json.dumps(features))
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._process = subprocess.Popen(
            [rustac_binary(), "serve", "-a", f"127.0.0.1:{port}", "collection.json", "items.json"],
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_loaded()
        return self

    def _wait_loaded(self) -> None:
        """Until every item is served (the server loads its files after it starts listening)."""
        end = time.monotonic() + 30
        ask = f"{self.url}/collections/{self.collection_id}/items?limit=10000"
        while time.monotonic() < end:
            assert self._process.poll() is None, "rustac serve exited"
            try:
                with urllib.request.urlopen(ask, timeout=5) as answer:
                    if len(json.loads(answer.read())["features"]) == len(self.items):
                        return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        raise AssertionError(f"rustac serve did not serve the {len(self.items)} items in 30 s")

    def __exit__(self, *exc) -> None:
        self._process.terminate()
        self._process.wait(10)
