"""The server's processes and shared memory: dying with the wrapper, the stubs' regions."""

from __future__ import annotations

import glob
import os
import signal

import psutil

from napari_sam3.serving.binary import STUB_NAME

SHM_PREFIX = "triton_python_backend_shm_region_"


def _shm_regions() -> set[str]:
    return {os.path.basename(p) for p in glob.glob(f"/dev/shm/{SHM_PREFIX}*")}


def _regions_of_other_stubs(own: set[int]) -> set[str]:
    regions = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.pid in own or proc.info["name"] != STUB_NAME:
            continue
        regions.update(a for a in proc.info["cmdline"] or () if a.startswith(SHM_PREFIX))
    return regions


def _die_with_parent(prctl, parent: int) -> None:  # runs in the child, between fork and exec
    prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM lets Triton unload and clean up
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)
