"""Every error the package raises on purpose is a `Sam3Error`: no `raise` of a bare built-in.

A `raise ValueError(...)` belongs as `raise InvalidInput(...)` (or another class of
core/errors.py that keeps the built-in as a base, so `except ValueError` still catches it).
"""

from __future__ import annotations

import ast
import builtins
import inspect
from pathlib import Path

from napari_sam3.core import errors

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "napari_sam3"
# Built-ins a raise may keep: protocols (an abstract member, a module's __getattr__, the end of
# an iterator) and `raise AssertionError("unreachable")`, not errors a caller handles.
ALLOWED = {
    "NotImplementedError",
    "StopIteration",
    "StopAsyncIteration",
    "AttributeError",
    "AssertionError",
}
FORBIDDEN = {
    name
    for name, value in vars(builtins).items()
    if inspect.isclass(value) and issubclass(value, Exception) and name not in ALLOWED
}


def bare_raises(source: str) -> list[tuple[int, str]]:
    """(line, built-in) of each `raise` of a built-in exception class in `source`. A bare
    `raise` and a re-raise of a caught exception (`raise error`, `raise error from None`) pass."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(raised, ast.Name) and raised.id in FORBIDDEN:
                found.append((node.lineno, raised.id))
    return sorted(found)


def _instead(builtin: str) -> str:
    base = getattr(builtins, builtin)
    ours = [
        name
        for name, cls in vars(errors).items()
        if inspect.isclass(cls) and base in cls.__bases__ and issubclass(cls, errors.Sam3Error)
    ]
    return ", ".join(ours) or f"a new Sam3Error subclass that keeps {builtin}"


def test_the_scan_finds_a_bare_builtin_and_passes_re_raises():
    source = """
def f(x, error):
    if x:
        raise ValueError(f"bad {x}")
    if error:
        raise error from None
    try:
        g()
    except OSError:
        raise
    raise KeyError
    raise NotImplementedError
    raise TimeoutError("late") from error
    raise AssertionError("unreachable")
"""
    assert bare_raises(source) == [(4, "ValueError"), (11, "KeyError"), (13, "TimeoutError")]
    assert "InvalidInput" in _instead("ValueError") and "UnknownKey" in _instead("KeyError")


def test_the_package_raises_no_bare_builtin():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50, PACKAGE
    found = [
        f"{path.relative_to(PACKAGE.parent.parent)}:{line}: raise {name}: use {_instead(name)}"
        for path in files
        for line, name in bare_raises(path.read_text(encoding="utf-8"))
    ]
    assert not found, "bare built-in exceptions raised:\n" + "\n".join(found)
