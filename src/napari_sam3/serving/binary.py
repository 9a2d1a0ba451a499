"""Finding the tritonserver to run: on PATH, or the CPU server in nvidia-pytriton."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from napari_sam3.core.errors import MissingFile

STUB_NAME = "triton_python_backend_stub"


@dataclass
class TritonBinary:
    executable: Path
    backend_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


def _pytriton_root() -> Path | None:
    try:
        import importlib.util

        spec = importlib.util.find_spec("pytriton")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    return root if (root / "bin" / "tritonserver").exists() else None


def find_tritonserver(workdir: Path) -> TritonBinary:
    """The server to run: `tritonserver` on PATH, else the one shipped in `nvidia-pytriton`."""
    on_path = shutil.which("tritonserver")
    if on_path:
        return TritonBinary(Path(on_path))
    root = _pytriton_root()
    if root is None:
        raise MissingFile(
            "no tritonserver found: put Triton's `tritonserver` on PATH (e.g. run inside the NGC "
            "container nvcr.io/nvidia/tritonserver) or `pip install --no-deps nvidia-pytriton==0.7.0` "
            "for the CPU test server"
        )
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise MissingFile(f"nvidia-pytriton has no Python-backend stub for Python {version}")
    # The backend looks for its stub beside libtriton_python.so: assemble that folder from links.
    backend_dir = workdir / "backends"
    python_dir = backend_dir / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for source in (
        root / "backends" / "python" / "libtriton_python.so",
        root / "backends" / "python" / "triton_python_backend_utils.py",
        stub,
    ):
        link = python_dir / source.name
        if not link.exists():
            link.symlink_to(source)
    libs = [
        sysconfig.get_config_var("LIBDIR") or "",
        str(root.parent.parent / "nvidia_pytriton.libs"),
    ]
    if os.environ.get("LD_LIBRARY_PATH"):
        libs.append(os.environ["LD_LIBRARY_PATH"])
    env = {
        # The stub runs the first python3 on PATH: it must be this interpreter, with its own libpython.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "LD_LIBRARY_PATH": os.pathsep.join(p for p in libs if p),
    }
    return TritonBinary(root / "bin" / "tritonserver", backend_dir, env)
