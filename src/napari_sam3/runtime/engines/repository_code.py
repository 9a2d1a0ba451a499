"""Whether a repository's copy of the model code is this napari-sam3's.

`sam3-export` copies the Python models' logic (napari_sam3/runtime, core/contract.py,
masks/rle.py, masks/rle_kernels.py) into the repository, because Triton's Python backend runs it from there. A
repository written by another version holds other code: the embedded engine (which runs the
package's own modules) and a server on that repository would then disagree. `sam3-serve` refuses
such a repository and the embedded engine warns; both give the command that refreshes it.
No grpc here: the embedded engine imports this module.
"""

from __future__ import annotations

import os
from pathlib import Path

from napari_sam3.core import contract, errors, validate

REFRESH_COMMAND = "sam3-export --refresh --out {repository}"


def _package_sources() -> dict[str, Path]:
    """The installed package's file for each file name a Python model's folder holds."""
    from napari_sam3.masks import rle, rle_kernels
    from napari_sam3.runtime import __file__ as logic_init

    logic = Path(logic_init).parent
    sources = {p.name: p for p in logic.glob("*.py") if p.name != "__init__.py"}
    sources["model.py"] = logic / "triton_adapter.py"  # the adapter is written as model.py
    sources["contract.py"] = Path(contract.__file__)
    sources["validate.py"] = Path(validate.__file__)
    sources["errors.py"] = Path(errors.__file__)
    sources["rle.py"] = Path(rle.__file__)
    sources["rle_kernels.py"] = Path(rle_kernels.__file__)
    return sources


def stale_logic(repository: str | os.PathLike) -> list[str]:
    """The repository's copies of the model logic ("sam3_cached/1/cached.py", ...) that differ
    from this installed napari-sam3's: a repository written by another version."""
    from napari_sam3.runtime.engines.model_config import parse_model_config

    sources = _package_sources()
    stale = []
    for path in sorted(Path(repository).glob("*/config.pbtxt")):
        name = path.parent.name
        try:
            config = parse_model_config(path.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - a config this reader cannot parse is not ours
            continue
        if config.backend != "python" or not config.parameters.get("logic_module"):
            continue  # not one of ours (a model the user added, an ensemble, a graph backend)
        for copy in sorted((Path(repository) / name).glob("[0-9]*/*.py")):
            source = sources.get(copy.name)
            if source is not None and copy.read_bytes() != source.read_bytes():
                stale.append(str(copy.relative_to(repository)))
    return stale


def stale_logic_message(repository: str | os.PathLike, stale: list[str]) -> str:
    shown = ", ".join(stale[:4]) + (f" and {len(stale) - 4} more" if len(stale) > 4 else "")
    return (
        f"{repository}: the model code copied into the repository ({shown}) differs from this "
        "napari-sam3's: it was written by another version, so Triton would run other code than "
        "the embedded engine. Refresh it (configs and model code; the graphs are kept, no "
        f"re-export): `{REFRESH_COMMAND.format(repository=repository)}`"
    )
