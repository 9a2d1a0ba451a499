"""The package's layers: every import (module level or inside a function) points down or sideways.

The order is read from docs/architecture.md ("Layers"), so the docs and this test cannot part.
The runtime modules copied beside the Triton models import their siblings by plain name in the
``else`` branch of ``if __package__:``; those names count as the package modules they stand for.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "napari_sam3"
TOP = "napari_sam3"  # the package's __init__.py (the public API): above every layer


def layer_order() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    found = re.findall(r"^`(\w+(?: < \w+)+)`$", text, flags=re.MULTILINE)
    assert len(found) == 1, "docs/architecture.md should hold one line `core < ... < cli`"
    return found[0].split(" < ")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    return TOP if len(parts) == 1 else parts[1]


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _copied_siblings(tree: ast.Module) -> set[int]:
    """Ids of the import nodes in the `else` branch of a module-level `if __package__:`."""
    ids = set()
    for node in tree.body:
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and isinstance(test, ast.Name) and test.id == "__package__":
            for branch in node.orelse:
                ids.update(
                    id(n) for n in ast.walk(branch) if isinstance(n, ast.Import | ast.ImportFrom)
                )
    return ids


def imports(
    text: str, module: str, is_package: bool, by_stem: dict[str, list[str]]
) -> list[tuple[int, str]]:
    """(line, imported napari_sam3 module) for every import in module `module`'s `text`."""
    tree = ast.parse(text)
    copied = _copied_siblings(tree)
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            names = [".".join([*base, node.module] if node.module else base)]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        for name in names:
            if id(node) in copied and name.split(".")[0] != TOP:
                stems = by_stem.get(name.split(".")[0], [])
                assert len(stems) == 1, f"{module}:{node.lineno}: {name} is {stems or 'no module'}"
                name = stems[0]
            if name == TOP or name.startswith(TOP + "."):
                found.append((node.lineno, name))
    return found


def import_edges() -> list[tuple[str, int, str, str]]:
    """(file, line, from layer, to layer) for every import between two layers."""
    mods = modules()
    by_stem = defaultdict(list)
    for name in mods:
        by_stem[name.rpartition(".")[2]].append(name)
    edges = []
    for module, path in mods.items():
        text = path.read_text(encoding="utf-8")
        for line, target in imports(text, module, path.name == "__init__.py", by_stem):
            if layer_of(target) != layer_of(module):
                edges.append(
                    (str(path.relative_to(ROOT)), line, layer_of(module), layer_of(target))
                )
    return edges


def test_every_package_has_a_layer():
    order = layer_order()
    layers = {layer_of(m) for m in modules()} - {TOP}
    assert layers - set(order) == set(), "place the new package in docs/architecture.md's Layers"
    assert set(order) - layers == set(), (
        "docs/architecture.md's Layers names a package that is gone"
    )


def test_no_import_points_up():
    rank = {name: i for i, name in enumerate(layer_order())}
    rank[TOP] = len(rank)
    upward = [
        f"{where}:{line}: {low} imports {high}, a higher layer"
        for where, line, low, high in import_edges()
        if rank[high] > rank[low]
    ]
    assert not upward, "\n".join(upward)


def test_no_cycle_between_packages():
    graph: dict[str, dict[str, tuple[str, int]]] = defaultdict(dict)
    for where, line, low, high in import_edges():
        graph[low].setdefault(high, (where, line))

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph[start]:
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(
        f"{where}:{line}: {a} imports {b}, whose imports lead back to {a}"
        for a in list(graph)
        for b, (where, line) in graph[a].items()
        if reaches(b, a, {b})
    )
    assert not cycles, "\n".join(cycles)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from napari_sam3.scene.run import x\n", [(1, "napari_sam3.scene.run")]),
        ("def f():\n    import napari_sam3.client.sam3\n", [(2, "napari_sam3.client.sam3")]),
        ("from ..scene import run\n", [(1, "napari_sam3.scene")]),
        (
            "if __package__:\n    pass\nelse:\n    import cached\n",
            [(4, "napari_sam3.runtime.cached")],
        ),
        ("import numpy\n", []),
    ],
)
def test_imports_are_found_wherever_they_are(source, expected):
    """Function-level, relative and copied-sibling imports all count (here as if in prompts/)."""
    by_stem = {"cached": ["napari_sam3.runtime.cached"]}
    assert imports(source, "napari_sam3.prompts.probe", False, by_stem) == expected
