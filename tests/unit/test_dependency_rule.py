"""The dependency rule: domain is pure; use-cases know only domain and ports."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STDLIB = set(sys.stdlib_module_names)


def imports(package: str) -> list[tuple[Path, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found += [(path, a.name.split(".")[0]) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((path, node.module.split(".")[0]))
    return found


def test_domain_imports_only_the_standard_library_and_msgspec() -> None:
    bad = [
        (p.name, m)
        for p, m in imports("domain")
        if m not in STDLIB and m not in {"msgspec", "domain"}
    ]
    assert bad == []


@pytest.mark.parametrize(
    "forbidden",
    [
        "litestar",
        "sqlalchemy",
        "httpx",
        "openai_harmony",
        "asyncpg",
        "aiosqlite",
        "uvicorn",
        "adapters",
    ],
)
def test_service_never_imports_frameworks_or_adapters(forbidden: str) -> None:
    assert [p.name for p, m in imports("service") if m == forbidden] == []


def test_domain_and_service_never_import_gpu_stacks() -> None:
    heavy = {"torch", "sglang", "vllm"}
    assert [
        (p.name, m)
        for pkg in ("domain", "service", "adapters")
        for p, m in imports(pkg)
        if m in heavy
    ] == []
