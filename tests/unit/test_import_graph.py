"""The layout's rules, read from the source with `ast`: no import circle among resplog's own
modules (deferred imports inside functions and `TYPE_CHECKING` blocks count too), a
module never imports the package it belongs to (siblings are imported directly), and the
layers point inward (`domain/` imports no other layer, `service/` no adapter)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "service", "adapters", "migrations")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imported(name: str, path: Path) -> Iterator[str]:
    """Every first-party module `name` imports: `from P import n` names the module `P.n`
    where there is one, else the package `P` itself."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:
                    yield f"{base}.{alias.name}"
                elif base in MODULES:
                    yield base


GRAPH = {name: set(_imported(name, path)) - {name} for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_the_graph_reads_the_whole_tree() -> None:
    assert len(MODULES) > 150
    assert "service.ports" in GRAPH["service.bundle"]


def test_no_module_imports_take_part_in_a_circle() -> None:
    assert _cycles() == []


def test_no_module_imports_its_own_package() -> None:
    through = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if name.startswith(target + ".") and MODULES[target].name == "__init__.py"
    )
    assert through == []


def test_the_layers_point_inward() -> None:
    outward = sorted(
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if (name.startswith("domain") and not target.startswith("domain"))
        or (name.startswith("service") and target.startswith(("adapters", "migrations")))
    )
    assert outward == []
