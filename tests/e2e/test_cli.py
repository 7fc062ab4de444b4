"""The `resplog` command as an operator runs it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.e2e.conftest import RESPLOG


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RESPLOG, *args], capture_output=True, text=True, timeout=60)


def test_serve_refuses_an_unmigrated_database_and_names_the_fix(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    result = run("serve", "--database-url", url, "--port", "0")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "resplog migrate --database-url" in lines[0]


def test_migrate_then_serve_help_and_unknown_engine(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrated = run("migrate", "--database-url", url)
    assert migrated.returncode == 0
    assert "head" in migrated.stdout
    assert run("migrate", "--database-url", url).returncode == 0  # idempotent
    for command in ([], ["serve"], ["migrate"]):
        shown = run(*command, "--help")
        assert shown.returncode == 0
        assert "Usage:" in shown.stdout
    bad = run("serve", "--database-url", url, "--engine", "nope")
    assert bad.returncode == 2
    assert "nope" in bad.stderr


def test_a_database_url_that_cannot_be_reached_is_one_clear_line() -> None:
    result = run("migrate", "--database-url", "postgresql://nobody@127.0.0.1:1/none")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1
