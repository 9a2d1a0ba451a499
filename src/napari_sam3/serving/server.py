"""`sam3-serve DIR`: run a Triton Inference Server on a model repository written by `sam3-export`.

Uses `tritonserver` from PATH, or the CPU server inside the `nvidia-pytriton` wheel (which has
only the Python backend: serve a `--flavor python` repository with it). It checks the repository
and the ports before starting, binds to loopback unless told otherwise, reports ready only when
every model is READY on the server it started, then supervises it: a dead Python-backend stub gets
its model reloaded, and a server that cannot be repaired is reported and stopped. The server dies
with the wrapper, however the wrapper ends, and leaves no shared memory behind."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import psutil

from napari_sam3.core.errors import Sam3Error, TimedOut
from napari_sam3.serving.binary import STUB_NAME, TritonBinary, find_tritonserver
from napari_sam3.serving.logs import _reason, log_errors
from napari_sam3.serving.ports import PortError, _connect_host, check_port, free_port
from napari_sam3.serving.processes import (
    SHM_PREFIX,
    _die_with_parent,
    _regions_of_others,
    _shm_regions,
)
from napari_sam3.serving.repository_check import ModelEntry, RepositoryError, check_repository
from napari_sam3.serving.tls import TlsFiles

# Header guarding Triton's model-repository, logging, trace and shared-memory APIs: explicit model
# control (needed to reload a model whose stub died) would otherwise let any client that reaches
# the ports load models, i.e. run code in the Python backend.
KEY_HEADER = "sam3-serve-key"


RESTRICTED = "model-repository,logging,trace,shared-memory"


class ServeError(Sam3Error, RuntimeError):
    """The server could not be started, or is no longer healthy."""


# Our own server is local: never send its key through an HTTP proxy from the environment.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class TritonServer:
    """A `tritonserver` child process on loopback ports; a context manager.

    `start()` checks the repository and the ports, starts the server and returns when every model
    of the repository is READY on it; `heal()` repairs it (call it periodically, as `sam3-serve`
    does). The server gets SIGTERM when the thread that started it ends (Linux): start it from a
    thread that lives as long as it should, e.g. the main thread.
    """

    def __init__(
        self,
        repository: str | os.PathLike,
        grpc_port: int | None = None,
        http_port: int | None = None,
        host: str = "127.0.0.1",
        log_file: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
        *,
        http_host: str = "127.0.0.1",
        tls: TlsFiles | None = None,
        load_timeout: float = 600.0,
    ) -> None:
        self.repository = Path(repository).resolve()
        self.models: dict[str, ModelEntry] = check_repository(self.repository)
        self.host = host
        self.http_host = http_host
        self.grpc_port = free_port() if grpc_port is None else grpc_port
        self.http_port = free_port() if http_port is None else http_port
        self.log_file = log_file
        self.extra_args = extra_args or []
        self.tls = tls
        self.load_timeout = load_timeout
        self.process: subprocess.Popen | None = None
        self._workdir: tempfile.TemporaryDirectory | None = None
        self._shm_before: set[str] = set()
        self._own_regions: set[str] = set()
        self._stub_counts: Counter[str] = Counter()
        self._log_handle = None
        self._log_path: Path | None = None
        self._key = secrets.token_hex(16)
        self._server_id = f"sam3-serve-{secrets.token_hex(8)}"

    @property
    def grpc_address(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def http_address(self) -> str:
        return f"{self.http_host}:{self.http_port}"

    @property
    def log_path(self) -> Path | None:
        """The file Triton logs to (the `log_file` given, else one in a private folder)."""
        return self._log_path

    def _check_before_start(self, binary: TritonBinary) -> None:
        if self.grpc_port == self.http_port:
            raise PortError(f"--grpc-port and --http-port are both {self.grpc_port}: give two")
        check_port(self.host, self.grpc_port, "grpc")
        check_port(self.http_host, self.http_port, "http")
        if self.tls is not None:
            self.tls.check()
        if binary.backend_dir is not None:  # the nvidia-pytriton server: Python backend only
            foreign = [
                m.name for m in self.models.values() if m.backend not in ("python", "ensemble")
            ]
            if foreign:
                raise RepositoryError(
                    f"model {foreign[0]} needs the {self.models[foreign[0]].backend} backend, which "
                    "the tritonserver inside nvidia-pytriton lacks (it has only the Python backend): "
                    "export with `sam3-export --flavor python`, or put a full tritonserver on PATH"
                )

    def start(self, timeout: float = 120.0) -> TritonServer:
        self._workdir = tempfile.TemporaryDirectory(prefix="sam3-serve-")
        try:
            binary = find_tritonserver(Path(self._workdir.name))
            self._check_before_start(binary)
        except BaseException:
            self._workdir.cleanup()
            self._workdir = None
            raise
        args = [
            str(binary.executable),
            f"--model-repository={self.repository}",
            f"--id={self._server_id}",
            f"--grpc-address={self.host}",
            f"--grpc-port={self.grpc_port}",
            f"--http-address={self.http_host}",
            f"--http-port={self.http_port}",
            "--allow-metrics=false",
            # Explicit control, to reload a model whose stub died; failures are read from the
            # repository index (with exit-on-error the server would leave before it could answer).
            "--model-control-mode=explicit",
            "--load-model=*",
            "--exit-on-error=false",
            "--strict-readiness=true",
            f"--http-restricted-api={RESTRICTED}:{KEY_HEADER}={self._key}",
            f"--grpc-restricted-protocol={RESTRICTED}:{KEY_HEADER}={self._key}",
            *(self.tls.triton_args() if self.tls else []),
            *self.extra_args,
        ]
        if binary.backend_dir is not None:
            args.append(f"--backend-directory={binary.backend_dir}")
        env = {**os.environ, **binary.env}
        self._shm_before = _shm_regions()
        self._log_path = (
            Path(self.log_file) if self.log_file else Path(self._workdir.name) / "tritonserver.log"
        )
        self._log_handle = open(self._log_path, "ab")  # noqa: SIM115 - closed in stop()
        preexec = None
        if (
            sys.platform.startswith("linux")
            and threading.current_thread() is threading.main_thread()
        ):
            # PDEATHSIG fires when the *thread* that forked ends; only the main thread lives as
            # long as the process. The prctl function is resolved here, before the fork.
            prctl = ctypes.CDLL(None, use_errno=True).prctl
            parent = os.getpid()
            preexec = lambda: _die_with_parent(prctl, parent)  # noqa: E731
        self.process = subprocess.Popen(
            args,
            env=env,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the stubs go with it
            preexec_fn=preexec,
        )
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    # -- talking to our own server -----------------------------------------------------------
    def _http(self, method: str, path: str, timeout: float = 5.0) -> tuple[int, bytes] | None:
        url = f"http://{_connect_host(self.http_host)}:{self.http_port}{path}"
        request = urllib.request.Request(
            url, data=b"{}" if method == "POST" else None, method=method,
            headers={KEY_HEADER: self._key},
        )  # fmt: skip
        try:
            with _DIRECT.open(request, timeout=timeout) as response:
                return response.status, response.read(4 * 1024 * 1024)
        except urllib.error.HTTPError as error:
            return error.code, error.read(64 * 1024)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def _alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _owns_ports(self) -> bool:
        """Whether the listening sockets on our ports are our tritonserver's own."""
        try:
            listening = {
                c.laddr.port
                for c in psutil.Process(self.process.pid).net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN
            }
        except psutil.AccessDenied:  # some platforms hide sockets: trust the id check alone
            return True
        except psutil.NoSuchProcess:
            return False
        return {self.grpc_port, self.http_port} <= listening

    def _is_ours(self) -> bool:
        answer = self._http("GET", "/v2")
        if answer is None or answer[0] != 200:
            return False
        try:
            name = json.loads(answer[1]).get("name")
        except (ValueError, AttributeError):
            return False
        return name == self._server_id and self._owns_ports()

    def model_states(self) -> dict[str, tuple[str, str]] | None:
        """`{model: (state, reason)}` from the server's repository index; None if it does not answer."""
        answer = self._http("POST", "/v2/repository/index")
        if answer is None or answer[0] != 200:
            return None
        try:
            index = json.loads(answer[1])
            return {
                str(e["name"]): (str(e.get("state", "")), str(e.get("reason", "")))
                for e in index
                if isinstance(e, dict) and "name" in e
            }
        except (ValueError, TypeError):
            return None

    def _stubs(self) -> dict[int, tuple[str, str]]:
        """`{pid: (model, shm region)}` of our server's Python-backend stubs."""
        stubs = {}
        try:
            children = psutil.Process(self.process.pid).children()
        except psutil.NoSuchProcess:
            return stubs
        for child in children:
            try:
                if child.name() != STUB_NAME:
                    continue
                argv = child.cmdline()
            except psutil.Error:
                continue
            model = self._model_of(argv[1] if len(argv) > 1 else "")
            region = next((a for a in argv if a.startswith(SHM_PREFIX)), "")
            if model is not None:
                stubs[child.pid] = (model, region)
        return stubs

    def _model_of(self, model_file: str) -> str | None:
        # A stub's first argument is its model file, <repository>/<model>/<version>/model.py.
        try:
            parts = Path(model_file).relative_to(self.repository).parts
        except ValueError:
            return None
        return parts[0] if parts and parts[0] in self.models else None

    def _note_stubs(self) -> Counter[str]:
        stubs = self._stubs()
        self._own_regions.update(region for _, region in stubs.values() if region)
        return Counter(model for model, _ in stubs.values())

    def _exit_message(self) -> str:
        errors = log_errors(self._log_path) if self._log_path else []
        message = f"tritonserver exited with code {self.process.returncode}"
        if errors:
            message += ": " + "; ".join(errors)
        return message + f" (log: {self._log_path})"

    def _load_failures(self, states: dict[str, tuple[str, str]]) -> list[str]:
        failed = {m for m in self.models if states.get(m, ("",))[0] != "READY"}
        lines = []
        for name in sorted(failed):
            state, reason = states.get(name, ("", ""))
            if reason:
                lines.append(f"  {name}: {_reason(reason)}")
                continue
            broken_steps = [s for s in self.models[name].steps if s in failed]
            why = f"needs {', '.join(broken_steps)}" if broken_steps else (state or "not loaded")
            lines.append(f"  {name}: not loaded ({why})")
        return lines

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self._alive():
                raise ServeError(self._exit_message())
            # With explicit model control the endpoints open once the startup loads are done.
            states = self.model_states() if self._is_ours() else None
            if states is not None and not any(s == "LOADING" for s, _ in states.values()):
                failures = self._load_failures(states)
                if failures:
                    raise ServeError(
                        f"{len(failures)} of {len(self.models)} models of {self.repository} did "
                        "not load:\n" + "\n".join(failures) + f"\n(log: {self._log_path})"
                    )
                extra = sorted(set(states) - set(self.models))
                if extra:  # the repository changed under us, or the answer is not about it
                    raise ServeError(f"the server lists models not in {self.repository}: {extra}")
                self._stub_counts = self._note_stubs()
                return
            if time.monotonic() > deadline:
                loading = sorted(m for m, (s, _) in (states or {}).items() if s != "READY")
                raise TimedOut(
                    f"tritonserver did not get ready within {timeout:.0f} s"
                    + (f" (still loading: {', '.join(loading)})" if loading else "")
                    + f"; see its log {self._log_path}"
                )
            time.sleep(0.25)

    # -- supervision -------------------------------------------------------------------------
    def problems(self) -> dict[str, str]:
        """What is wrong now, by model (`"*"`: the whole server); empty when healthy."""
        if not self._alive():
            return {"*": self._exit_message()}
        found = {}
        counts = self._note_stubs()
        for model, expected in self._stub_counts.items():
            if counts[model] < expected:
                found[model] = f"{expected - counts[model]} of its {expected} stub process(es) died"
        states = self.model_states()
        if states is None:
            if not self._alive():
                return {"*": self._exit_message()}
            return {"*": f"the server does not answer on http {self.http_address}"}
        for model in self.models:
            state, reason = states.get(model, ("", ""))
            if state != "READY" and model not in found:
                found[model] = f"state {state or 'not loaded'}" + (
                    f": {_reason(reason)}" if reason else ""
                )
        return found

    def reload(self, model: str) -> None:
        """Unload and load `model` (measured: a load alone of a loaded model returns at once,
        and requests keep failing on the dead stub)."""
        self._http("POST", f"/v2/repository/models/{model}/unload", timeout=self.load_timeout)
        answer = self._http(
            "POST", f"/v2/repository/models/{model}/load", timeout=self.load_timeout
        )
        if answer is None or answer[0] != 200:
            detail = answer[1].decode("utf-8", "replace") if answer else "no answer"
            with contextlib.suppress(ValueError, AttributeError):
                detail = str(json.loads(detail).get("error", detail))
            raise ServeError(f"could not reload {model}: {_reason(detail)}")
        deadline = time.monotonic() + 30
        while self._note_stubs()[model] < self._stub_counts[model]:
            if time.monotonic() > deadline:
                raise ServeError(f"reloaded {model}, but its stub processes did not come back")
            time.sleep(0.2)

    def heal(self) -> list[str]:
        """Reload every model found broken; what was done, one line each. ServeError when the
        server cannot be repaired (it is dead, or a reload failed)."""
        found = self.problems()
        if "*" in found:
            raise ServeError(found["*"])
        done = []
        # Composing models first, so that a broken ensemble can find its steps loaded again.
        for model in sorted(found, key=lambda m: self.models[m].backend == "ensemble"):
            self.reload(model)
            done.append(f"{model}: {found[model]}; reloaded it")
        if done:
            still = self.problems()
            if still:
                raise ServeError(
                    "still unhealthy after reloading: "
                    + "; ".join(f"{m}: {why}" for m, why in still.items())
                )
        return done

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is not None and self.process.poll() is None:
            self._note_stubs()
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
        # Our stubs' regions, and regions new since the start that no other server's stub uses.
        own_pids = {self.process.pid} if self.process is not None else set()
        leftover = (_shm_regions() - self._shm_before) - _regions_of_others(own_pids)
        for region in (self._own_regions | leftover) & _shm_regions():
            with contextlib.suppress(FileNotFoundError, PermissionError):
                os.unlink(f"/dev/shm/{region}")
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
