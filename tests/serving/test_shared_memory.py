"""A server that stops removes its own shared memory, never a region another server starting
beside it has made (before that server's stub exists to name it)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from napari_sam3.serving.processes import SHM_PREFIX, _regions_of_others

HOLD = """
import mmap, sys
with open(sys.argv[1], "r+b") as f:
    mapped = mmap.mmap(f.fileno(), 4096)
    print("mapped", flush=True)
    sys.stdin.read()
"""


def test_a_region_mapped_by_another_tritonserver_is_in_use(tmp_path):
    region = f"{SHM_PREFIX}{uuid.uuid4()}"
    path = Path("/dev/shm") / region
    path.write_bytes(bytes(4096))
    server = tmp_path / "tritonserver"  # a process the system names tritonserver
    server.symlink_to(sys.executable)
    holder = subprocess.Popen([str(server), "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "mapped"
        assert region in _regions_of_others(set())
        assert region not in _regions_of_others({holder.pid})  # its own server's: removable
    finally:
        holder.stdin.close()
        holder.wait(10)
        os.unlink(path)
    assert region not in _regions_of_others(set())
