"""What scripts/setup.sh installs is required: a test that needs a missing part fails, naming it
and what installs it. Nothing here skips.

Two markers say what a test needs beyond the library (pyproject.toml registers them; the root
conftest checks them before each test): `needs_export` (torch, the export tool and the official
sam3 package) and `needs_tritonserver` (added by the conftest to every test that uses a server
fixture). Where they are installed, as scripts/setup.sh does, they are required all the same.
"""

from __future__ import annotations

import functools
import importlib
import os
import tempfile
from pathlib import Path

import pytest

SETUP = "scripts/setup.sh installs it"
PIP = "python -m pip install -c constraints.txt"
TEST_EXTRA = f'{PIP} -e ".[test]"'
EXPORT_TOOL = f"{PIP} -e ./export"

# How to install what is not in napari-sam3's own dependencies or its `test` extra.
INSTALL = {
    "torch": f"{PIP} torch torchvision (constraints.txt pins both)",
    "sam3_export": EXPORT_TOOL,
    "sam3": f"{EXPORT_TOOL} (the export tool depends on the official sam3 package)",
    "onnx": f"{EXPORT_TOOL} (the export tool depends on onnx)",
    "pytriton": f"{PIP} --no-deps nvidia-pytriton==0.7.0",
    "nncf": f'{PIP} -e "./export[int8]"',
}

# Fixtures that start a tritonserver: a test that uses one needs the server binary.
SERVER_FIXTURES = frozenset({"triton_server", "tls_server", "slow_server", "sam3_serve"})
EXPORT_MODULES = ("torch", "sam3_export", "sam3")


def _missing(module: str, install: str | None, error: BaseException) -> str:
    top = module.split(".")[0]
    how = install or INSTALL.get(top, TEST_EXTRA)
    return f"{module} is required ({SETUP}) but cannot be imported ({error}); install it: {how}"


def require(module: str, install: str | None = None):
    """The imported module; a missing one fails the test (or the module's collection)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        problem = _missing(module, install, error)
    pytest.fail(problem, pytrace=False)  # outside `except`: the report is this line alone


def require_export() -> None:
    """torch, the export tool and the official sam3 package, all importable."""
    for module in EXPORT_MODULES:
        require(module)


@functools.cache
def _tritonserver_problem(bundled_only: bool) -> str | None:
    """Why no tritonserver can be started (None when one can), found the way sam3-serve finds it."""
    from napari_sam3.serving import binary

    if bundled_only:
        if binary._pytriton_root() is None:
            return "nvidia-pytriton's CPU tritonserver is not installed"
        return None
    with tempfile.TemporaryDirectory(prefix="sam3-find-triton-") as workdir:
        try:
            found = binary.find_tritonserver(Path(workdir))
        except FileNotFoundError as error:
            return str(error)
    if not os.access(found.executable, os.X_OK):
        return f"{found.executable} is not executable"
    return None


def require_tritonserver(*, bundled_only: bool = False) -> None:
    """A tritonserver to start: on PATH or nvidia-pytriton's (only the latter if `bundled_only`)."""
    problem = _tritonserver_problem(bundled_only)
    if problem:
        pytest.fail(
            f"tritonserver is required ({SETUP}: `{INSTALL['pytriton']}`, a CPU server): {problem}",
            pytrace=False,
        )


def require_display() -> None:
    """An X display for napari: pytest-xvfb starts one (the `test` extra, Xvfb from setup.sh)."""
    if not os.environ.get("DISPLAY"):
        pytest.fail(
            "an X display is required for napari: pytest-xvfb starts Xvfb "
            f"({SETUP}: the xvfb Debian package and pytest-xvfb from {TEST_EXTRA})",
            pytrace=False,
        )


def mark_needs(item: pytest.Item) -> None:
    """Marks a test that uses a server fixture `needs_tritonserver`, so that `-m` selects by it."""
    if SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        item.add_marker(pytest.mark.needs_tritonserver)


def check_needs(item: pytest.Item) -> None:
    """Fails the test, before its fixtures run, if what its markers name is missing."""
    if item.get_closest_marker("needs_export"):
        require_export()
    if item.get_closest_marker("needs_tritonserver"):
        require_tritonserver()
