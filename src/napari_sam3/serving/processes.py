"""The server's processes and shared memory: dying with the wrapper, the stubs' regions."""

from __future__ import annotations

import glob
import os
import re
import signal

import psutil

from napari_sam3.serving.binary import STUB_NAME

SHM_PREFIX = "triton_python_backend_shm_region_"


def _shm_regions() -> set[str]:
    return {os.path.basename(p) for p in glob.glob(f"/dev/shm/{SHM_PREFIX}*")}


def _regions_of_others(own: set[int]) -> set[str]:
    """Shared-memory regions another server uses: named on its stubs' command lines, or mapped
    by a tritonserver, which creates and maps a region before it starts the stub that names it
    (a server starting beside one that stops must not lose its region)."""
    regions = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.pid in own or proc.info["name"] not in (STUB_NAME, "tritonserver"):
            continue
        regions.update(a for a in proc.info["cmdline"] or () if a.startswith(SHM_PREFIX))
        try:
            with open(f"/proc/{proc.pid}/maps") as maps:
                regions.update(_MAPPED.findall(maps.read()))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return regions


_MAPPED = re.compile(rf"/dev/shm/({SHM_PREFIX}[^\s]+)")


def _die_with_parent(prctl, parent: int) -> None:  # runs in the child, between fork and exec
    prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM lets Triton unload and clean up
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)
