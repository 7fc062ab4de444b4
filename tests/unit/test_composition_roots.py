"""Only the composition roots build concrete adapters: `adapters/cli/` imports the store
from one module at most (where it opens the database as the audit's ports), and the audit
view not at all (it gets its ports from the bundle the app is built with). Read with `ast`,
deferred imports inside functions and `TYPE_CHECKING` blocks included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _importers_of(package: str, target: str) -> list[str]:
    """The modules of `package` (a folder) that import `target` or anything in it."""
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            if any(n == target or n.startswith(target + ".") for n in names):
                found.append(path.relative_to(ROOT).as_posix())
                break
    return found


def test_the_cli_imports_the_store_in_one_module_at_most() -> None:
    assert _importers_of("adapters/cli", "adapters.store") in ([], ["adapters/cli/store.py"])


def test_the_audit_view_never_imports_the_store() -> None:
    assert _importers_of("adapters/auditview", "adapters.store") == []


def test_the_check_sees_an_import_of_the_store() -> None:
    assert "adapters/wiring.py" in _importers_of("adapters", "adapters.store")
