"""The dependency rule, as an allow-list: what each layer MAY import (anything else fails).

The domain is pure; the use-cases know only the domain and their ports; each adapter knows
its own framework, the inner layers and itself. Only the store touches a database driver
(and the migrations, which are the store's schema); only the composition roots (the app
factory, adapters/wiring.py and the CLI) put adapters together.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = frozenset(sys.stdlib_module_names)
INNER = frozenset({"msgspec", "domain", "service"})

# Per layer (a package or one module): the modules it may import besides the standard
# library. A name allows that package and everything in it ("adapters.store" allows
# "adapters.store.scan"); the same goes for third-party packages.
ALLOWED: dict[str, frozenset[str]] = {
    "domain": frozenset({"msgspec", "domain"}),
    "service": INNER,
    "adapters/http": INNER | {"litestar", "adapters.http"},
    "adapters/store": INNER
    | {"sqlalchemy", "asyncpg", "aiosqlite", "alembic", "migrations", "adapters.store"},
    "adapters/engines": INNER | {"aiohttp", "openai_harmony", "pypdf", "adapters.engines"},
    "adapters/sealing": INNER | {"cryptography", "adapters.sealing"},
    # The metrics see HTTP responses by watching them at the edge (adapters/http/watch.py:
    # a protocol, no litestar; a worker's metrics import it too).
    "adapters/metrics": INNER | {"prometheus_client", "adapters.metrics", "adapters.http.watch"},
    # The `mcp` client, and the HTTP stack under it where a connection is made (hosts.py).
    "adapters/tools": INNER | {"mcp", "httpx2", "httpcore2", "anyio", "adapters.tools"},
    # Webhooks: one signed POST, under the host rule of the tools (hosts.py).
    "adapters/webhooks": INNER
    | {"httpx2", "httpcore2", "adapters.webhooks"}
    | {"adapters.tools.hosts"},
    # Tracing (the optional `otel` extra): only this package imports opentelemetry. The
    # status of a request that got no response comes from the edge's watch module.
    "adapters/otel": INNER | {"opentelemetry", "adapters.otel", "adapters.http.watch"},
    # The web audit view: reads the store, streams with the HTTP adapter's SSE framing.
    "adapters/auditview": INNER | {"adapters.auditview", "adapters.http"},
    "adapters/cli": INNER
    | {"click", "rich", "uvicorn", "uvloop", "adapters.cli", "adapters.store", "adapters.http"}
    | {"adapters.wiring", "adapters.sealing", "adapters.metrics", "adapters.auditview"}
    | {"adapters.otel", "adapters.tools.hosts"},  # `--mcp-hosts` checked as it is read
    "migrations": frozenset({"sqlalchemy", "alembic", "migrations", "adapters.store.tables"})
    | {"adapters.store.urls"},
}

# The composition roots, beyond their layer's list: they pick and connect the adapters.
ROOTS: dict[str, frozenset[str]] = {
    "adapters/http/app.py": frozenset({"adapters.wiring"}),
    "adapters/wiring.py": INNER
    | {"adapters.store", "adapters.engines", "adapters.http", "adapters.sealing"}
    | {"adapters.tools", "adapters.webhooks"},
}

DRIVERS = ("sqlalchemy", "asyncpg", "aiosqlite", "sqlite3")


def imports(where: str) -> list[tuple[Path, str]]:
    """(file, module) for every absolute import in a package or module, also those inside
    functions."""
    target = ROOT / where
    paths = [target] if target.suffix == ".py" else sorted(target.rglob("*.py"))
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.module))
    return found


def allowed(module: str, names: frozenset[str]) -> bool:
    if module.split(".")[0] in STDLIB:
        return True
    return any(module == n or module.startswith(n + ".") for n in names)


def test_every_layer_is_listed() -> None:
    layers = {p.name for p in (ROOT / "adapters").iterdir() if p.is_dir() and p.name[0] != "_"}
    assert {f"adapters/{name}" for name in layers} == {
        k for k in ALLOWED if k.startswith("adapters/")
    }


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_what_it_may(layer: str) -> None:
    bad = [
        (p.relative_to(ROOT).as_posix(), m)
        for p, m in imports(layer)
        if not allowed(m, ALLOWED[layer] | ROOTS.get(p.relative_to(ROOT).as_posix(), frozenset()))
    ]
    assert bad == []


def test_the_composition_root_module_imports_only_what_it_may() -> None:
    names = ROOTS["adapters/wiring.py"]
    assert [m for _, m in imports("adapters/wiring.py") if not allowed(m, names)] == []


@pytest.mark.parametrize("layer", ["domain", "service", "adapters/http", "adapters/cli"])
def test_only_the_store_touches_a_database_driver(layer: str) -> None:
    """Redundant with the lists above on purpose: the one rule most worth a clear failure
    (sqlite3 is the standard library, so the lists alone would let it through)."""
    assert [(p.name, m) for p, m in imports(layer) if m.split(".")[0] in DRIVERS] == []


def test_no_layer_imports_a_gpu_stack() -> None:
    heavy = {"torch", "sglang", "vllm"}
    assert [
        (p.name, m)
        for pkg in ("domain", "service", "adapters")
        for p, m in imports(pkg)
        if m.split(".")[0] in heavy
    ] == []
