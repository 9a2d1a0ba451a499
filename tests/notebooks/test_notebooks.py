"""Every notebook in notebooks/ runs top to bottom on the tiny random-weight model.

Each notebook runs in a fresh `python3` kernel of this environment (nbclient), with notebooks/ as
its working directory (as Jupyter does), so that `import _setup` finds the shared helper. The
kernel gets this process's environment explicitly, so it inherits pytest-xvfb's virtual display,
plus:

- `NAPARI_SAM3_MODELS`: the tiny repository (`--flavor python --device cpu`, which the embedded
  engine and the CPU Triton server both run): `$SAM3_TINY_REPOSITORY` if set, else a copy of
  the suite's session-wide `tiny_repository` export whose Triton graphs compute at `auto`, as
  the notebooks' own export (sam3-export's defaults) writes them. The notebooks' embedded
  engine runs at its default, `auto`, and 04 checks that the server answers as it does; the
  suite's repository pins fp32 for Triton (tests/conftest.py SUITE_PRECISION);
- `NAPARI_SAM3_NOTEBOOK_OUT`: a temporary folder for the files the notebooks write;
- `NAPARI_APPLICATION_IPY_INTERACTIVE=false`: without it, a kernel that creates a napari viewer
  hung intermittently (docs: field notes).

Each notebook has a Checks cell that asserts on what it produced (row counts with the random
model's opened-up thresholds, columns, files that read back with their CRS) and prints
"checks passed"; a run must reach it. The committed notebooks must carry no outputs.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest

from .._required import require, require_display

nbformat = require("nbformat")
nbclient = require("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT = 600  # seconds for one cell (the first export of a model takes a few minutes)
NOTEBOOK_TIMEOUT = 1200  # seconds for a whole notebook, kernel start included


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _uses(path: Path, module: str) -> bool:
    """Whether a code cell imports `module` (or from it): `napari` does not match `napari_sam3`."""
    pattern = re.compile(rf"^\s*(?:from|import)\s+{re.escape(module)}\b", re.MULTILINE)
    return any(
        cell.cell_type == "code" and pattern.search(cell.source) for cell in _read(path).cells
    )


def _params():
    params = []
    for path in NOTEBOOKS:
        marks = [pytest.mark.napari] if _uses(path, "napari") else []
        if _uses(path, "napari_sam3.serving"):  # starts a tritonserver
            marks.append(pytest.mark.needs_tritonserver)
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.fixture(scope="session")
def notebook_models(request, tmp_path_factory) -> Path:
    given = os.environ.get("SAM3_TINY_REPOSITORY")
    if given:
        return Path(given)
    require("sam3_export")
    from napari_sam3.core import contract
    from sam3_export.triton_repo import write_repository

    out = tmp_path_factory.mktemp("notebook_models") / "random-tiny"
    suite = Path(request.getfixturevalue("tiny_repository"))
    shutil.copytree(suite, out, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = contract.load_manifest(out)
    write_repository(out, manifest, flavor="python", device="cpu", precision="auto")
    return out


def _kernel_env(models: Path, out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["NAPARI_SAM3_MODELS"] = str(models)
    env["NAPARI_SAM3_NOTEBOOK_OUT"] = str(out)
    env["NAPARI_APPLICATION_IPY_INTERACTIVE"] = "false"
    if env.get("DISPLAY") and env.get("QT_QPA_PLATFORM") == "offscreen":
        # napari cannot add image layers on the offscreen platform (no OpenGL); use the display.
        del env["QT_QPA_PLATFORM"]
    return env


def test_notebooks_are_found():
    names = {path.stem for path in NOTEBOOKS}
    for expected in ("01_quickstart", "02_exemplars_and_concepts", "03_interactive"):
        assert expected in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_clean(path: Path):
    """No outputs or execution counts in the repository, and the random-weight warning is there."""
    nb = _read(path)
    nbformat.validate(nb)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, f"{path.name}: clear the outputs of cells {dirty} before committing"
    markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown").lower()
    assert "random weights" in markdown and "napari_sam3_models" in markdown, (
        f"{path.name} must say plainly that random weights give meaningless masks and how to use "
        "a real checkpoint"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_asserts_on_its_outputs(path: Path):
    """A run proves more than "no cell raised": a Checks cell asserts on what the notebook made."""
    cells = _read(path).cells
    checks = [
        c for c in cells if c.cell_type == "code" and re.search(r"^\s*assert ", c.source, re.M)
    ]
    assert checks, f"{path.name}: end with a Checks cell that asserts on the notebook's outputs"
    assert any(c.cell_type == "markdown" and "## Checks" in c.source for c in cells)


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@pytest.mark.parametrize("path", _params())
def test_notebook_runs(path: Path, notebook_models: Path, tmp_path: Path):
    if _uses(path, "napari"):
        require_display()
    nb = _read(path)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
        # Ended at once (its process group killed) once run: a kernel's own teardown took 1-2 s
        # a notebook. One that starts a server ends gracefully, so that the server.stop it
        # registered with atexit runs.
        shutdown_kernel="graceful" if _uses(path, "napari_sam3.serving") else "immediate",
    )
    started = time.monotonic()
    try:
        client.execute(env=_kernel_env(notebook_models, tmp_path / "out"))
    finally:
        # The executed copy (outputs and all) for a look after a failure; never the committed file.
        nbformat.write(nb, tmp_path / path.name)
    print(f"{path.name}: {time.monotonic() - started:.1f} s")
    errors = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert not errors, f"see the executed copy {tmp_path / path.name}"
    # The Checks cell ran to its end, and the files went to the temporary folder.
    printed = "".join(out.get("text", "") for cell in nb.cells for out in cell.get("outputs", []))
    assert "checks passed" in printed
    if "_setup.output_dir(" in "".join(c.source for c in nb.cells):
        assert any((tmp_path / "out" / path.stem).iterdir()), "nothing written to the out folder"
