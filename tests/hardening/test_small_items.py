"""Small inputs that were silently misread on the code before this module.

`positive='no'` counted as a positive click; a float seed mask of 0.01 everywhere became an
all-True mask; a zero-area exemplar box gave 0 rows silently; `max_det=10**12` reported
"got -727379968"; atomic writes did not fsync before the rename.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from napari_sam3.core import files as io_utils
from napari_sam3.plugin.settings import ConnectionSettings, load_connection, save_connection


@pytest.fixture(scope="module")
def session(local_client):
    return local_client.interactive(np.zeros((60, 80, 3), np.uint8))


def test_positive_must_be_a_bool(session):
    session.reset()
    for value in ("no", "yes", 0, 1, None, 0.0):
        with pytest.raises(ValueError, match="positive must be True .* or False"):
            session.add_point((10, 10), positive=value)
    assert session.prompts.empty  # nothing was added by the refused clicks
    session.add_point((10, 10), positive=np.bool_(False))
    assert session.prompts.labels == (0,)
    session.reset()


def test_seed_masks_are_boolean_or_zero_one(session):
    session.reset()
    faint = np.full((60, 80), 0.01, np.float32)
    with pytest.raises(ValueError, match="values other than 0 and 1"):
        session.add_mask(faint)
    labels = np.zeros((60, 80), np.uint8)
    labels[10:30, 20:50] = 3
    with pytest.raises(ValueError, match="labels == 3"):
        session.add_mask(labels)
    with pytest.raises(ValueError, match="must be boolean, got dtype <U1"):
        session.add_mask(np.full((60, 80), "x"))
    # 0/1 numbers mean exactly what the boolean mask does.
    as_bool = session.add_mask(labels > 0)
    session.reset()
    as_float = session.add_mask((labels > 0).astype(np.float64))
    np.testing.assert_allclose(as_bool["iou"].values, as_float["iou"].values)
    session.reset()


def test_zero_area_exemplar_box_is_refused(local_client):
    image = np.zeros((64, 64, 3), np.uint8)
    for box in ([10, 10, 10, 40], [10, 20, 40, 20]):
        with pytest.raises(ValueError, match="exemplar box 0 .* has zero area"):
            local_client.segment(image, exemplar_boxes=[box])
        with pytest.raises(ValueError, match="zero area"):
            local_client.encode_exemplars(image, [[0, 0, 20, 20], box])


def test_max_det_beyond_int32_names_the_value(local_client):
    with pytest.raises(
        ValueError, match="max_det must be an integer from 1 to 2147483647, got 1000000000000"
    ):
        local_client.segment(np.zeros((64, 64, 3), np.uint8), "building", max_det=10**12)


def test_atomic_writes_reach_the_disk_before_the_rename(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(io_utils.os, "fsync", fsync)
    monkeypatch.setattr(io_utils.os, "replace", replace)
    target = tmp_path / "labels.bin"
    io_utils.atomic_write_bytes(target, b"payload")
    assert target.read_bytes() == b"payload"
    kinds = [kind for kind, _ in events]
    assert kinds == ["fsync", "replace", "fsync"], events
    assert events[0][1].startswith(str(tmp_path / ".labels.bin."))  # the temporary file
    assert events[2][1] == str(tmp_path)  # then the folder holding the new name


def test_connection_settings_remember_timeouts_and_tls(tmp_path, monkeypatch):
    monkeypatch.setenv("NAPARI_SAM3_CONFIG_DIR", str(tmp_path))
    saved = ConnectionSettings(engine="triton", connect_timeout=4.5, request_timeout=90,
                               tls=True, tls_root_cert="/certs/ca.pem")  # fmt: skip
    save_connection(saved)
    assert load_connection() == saved
    for bad in ({"connect_timeout": 0}, {"request_timeout": "600"}, {"tls": "yes"}):
        with pytest.raises(ValueError):
            ConnectionSettings(**bad)
