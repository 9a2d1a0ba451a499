"""`sam3-serve DIR`: run a Triton Inference Server on a model repository written by `sam3-export`.

Uses `tritonserver` from PATH, or the CPU server inside the `nvidia-pytriton` wheel (which has
only the Python backend: serve a `--flavor python` repository with it). Binds to loopback by
default, waits until every model is ready, prints the address, and on Ctrl-C / SIGTERM stops the
server and cleans up its Python-backend shared-memory regions.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SHM_PREFIX = "triton_python_backend_shm_region_"


@dataclass
class TritonBinary:
    executable: Path
    backend_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
        raise FileNotFoundError(
            "no tritonserver found: put Triton's `tritonserver` on PATH (e.g. run inside the NGC "
            "container nvcr.io/nvidia/tritonserver) or `pip install --no-deps nvidia-pytriton==0.7.0` "
            "for the CPU test server"
        )
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.exists():
        raise FileNotFoundError(f"nvidia-pytriton has no Python-backend stub for Python {version}")
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


def _shm_regions() -> set[str]:
    return set(glob.glob(f"/dev/shm/{SHM_PREFIX}*"))


class TritonServer:
    """A `tritonserver` child process on loopback ports; a context manager."""

    def __init__(
        self,
        repository: str | os.PathLike,
        grpc_port: int | None = None,
        http_port: int | None = None,
        host: str = "127.0.0.1",
        log_file: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.repository = Path(repository).resolve()
        if not (self.repository / "sam3_manifest.json").exists():
            raise FileNotFoundError(
                f"{self.repository} is not a napari-sam3 model repository (no sam3_manifest.json); "
                "write one with `sam3-export --out DIR`"
            )
        self.host = host
        self.grpc_port = grpc_port or free_port()
        self.http_port = http_port or free_port()
        self.log_file = log_file
        self.extra_args = extra_args or []
        self.process: subprocess.Popen | None = None
        self._workdir: tempfile.TemporaryDirectory | None = None
        self._shm_before: set[str] = set()
        self._log_handle = None

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_address(self) -> str:
        return f"{self.host}:{self.http_port}"

    def start(self, timeout: float = 120.0) -> TritonServer:
        self._workdir = tempfile.TemporaryDirectory(prefix="sam3-serve-")
        binary = find_tritonserver(Path(self._workdir.name))
        args = [
            str(binary.executable),
            f"--model-repository={self.repository}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--http-address={self.host}",
            f"--http-port={self.http_port}",
            "--allow-metrics=false",
            "--exit-on-error=true",
            "--strict-readiness=true",
            *self.extra_args,
        ]
        if binary.backend_dir is not None:
            args.append(f"--backend-directory={binary.backend_dir}")
        env = {**os.environ, **binary.env}
        self._shm_before = _shm_regions()
        if self.log_file:
            self._log_handle = open(self.log_file, "ab")  # noqa: SIM115 - closed in stop()
            out = self._log_handle
        else:
            out = subprocess.DEVNULL
        self.process = subprocess.Popen(
            args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        url = f"http://{self.http_address}/v2/health/ready"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"tritonserver exited with code {self.process.returncode} while loading "
                    f"{self.repository}"
                    + (f"; see its log {self.log_file}" if self.log_file else "")
                )
            with contextlib.suppress(urllib.error.URLError, ConnectionError, TimeoutError):
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            time.sleep(0.25)
        raise TimeoutError(f"tritonserver did not get ready within {timeout:.0f} s")

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            # SIGTERM to the server alone: it unloads its models and stops their stubs itself.
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        if self.process is not None:
            # The stubs are in the server's process group; make sure none outlives it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        for region in _shm_regions() - self._shm_before:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(region)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def __enter__(self) -> TritonServer:
        return self.start() if self.process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sam3-serve", description=__doc__.splitlines()[0])
    parser.add_argument("repository", help="model repository written by sam3-export")
    parser.add_argument("--grpc-port", type=int, default=8001)
    parser.add_argument("--http-port", type=int, default=8000)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument("--log-file", default=None)
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds to wait for readiness"
    )
    args = parser.parse_args(argv)

    server = TritonServer(
        args.repository, args.grpc_port, args.http_port, args.host, log_file=args.log_file
    )
    stopping = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        server.start(args.timeout)
    except (FileNotFoundError, RuntimeError, TimeoutError) as error:
        print(f"sam3-serve: {error}", file=sys.stderr)
        return 1
    print(
        f"sam3-serve: ready on grpc {server.grpc_address} (http {server.http_address})", flush=True
    )
    try:
        while not stopping and server.process.poll() is None:
            time.sleep(0.5)
    finally:
        server.stop()
    if not stopping:
        print(
            f"sam3-serve: tritonserver exited with code {server.process.returncode}",
            file=sys.stderr,
        )
        return 1
    print("sam3-serve: stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
