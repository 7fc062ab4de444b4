"""`resplog keys create|list|revoke` as an operator runs them."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import RESPLOG


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RESPLOG, *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    assert run("migrate", "--database-url", url).returncode == 0
    return url


def test_create_prints_the_key_last_and_stores_only_its_hash(db: str) -> None:
    made = run("keys", "create", "--owner", "acme", "--name", "ci", "--database-url", db)
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("rsk-") and len(key) > 40
    with sqlite3.connect(db.split("///", 1)[1]) as conn:
        rows = conn.execute("SELECT owner, name, key_hash, prefix FROM api_keys").fetchall()
    assert rows == [("acme", "ci", hashlib.sha256(key.encode()).hexdigest(), key[:12])]
    dump = "\n".join(str(r) for r in rows)
    assert key not in dump


def test_list_shows_keys_but_never_secrets_or_hashes(db: str) -> None:
    keys = [
        run("keys", "create", "--owner", owner, "--database-url", db).stdout.splitlines()[-1]
        for owner in ("acme", "beta")
    ]
    listed = json.loads(run("keys", "list", "--json", "--database-url", db).stdout)
    assert [k["owner"] for k in listed] == ["acme", "beta"]
    assert set(listed[0]) == {"id", "owner", "name", "prefix", "created_at", "revoked_at"}
    table = run("keys", "list", "--owner", "beta", "--database-url", db).stdout
    assert "beta" in table and "acme" not in table and "active" in table
    for key in keys:
        text = json.dumps(listed) + table
        assert key not in text and hashlib.sha256(key.encode()).hexdigest() not in text


def test_revoke_once_then_errors_are_one_line_and_exit_1(db: str) -> None:
    run("keys", "create", "--owner", "acme", "--database-url", db)
    key_id = json.loads(run("keys", "list", "--json", "--database-url", db).stdout)[0]["id"]
    revoked = run("keys", "revoke", key_id, "--database-url", db)
    assert revoked.returncode == 0 and key_id in revoked.stdout
    listed = json.loads(run("keys", "list", "--json", "--database-url", db).stdout)
    assert listed[0]["revoked_at"] is not None
    for args, words in [
        (("keys", "revoke", key_id), "already revoked"),
        (("keys", "revoke", "key_nope"), "no API key"),
        (("keys", "create", "--owner", "two words"), "invalid owner"),
    ]:
        failed = run(*args, "--database-url", db)
        assert failed.returncode == 1
        lines = failed.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], failed.stderr


def test_keys_commands_refuse_an_unmigrated_database(tmp_path: Path) -> None:
    failed = run("keys", "list", "--database-url", f"sqlite:///{tmp_path / 'new.db'}")
    assert failed.returncode == 1
    assert "resplog migrate" in failed.stderr and len(failed.stderr.strip().splitlines()) == 1
