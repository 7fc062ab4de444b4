"""The backup and point-in-time restore drill: a base backup (`pg_basebackup`) and WAL
archiving of a private cluster while responses stream, then a restore to a moment in the
middle of the streams (`recovery_target_lsn`). The restored log is whole: what committed
before the target is there, nothing after it; `resplog verify --all` passes, and so does
`verify --all --checkpoint` against a signed checkpoint taken before the target; a stream cut
at the target is a running response whose lease has lapsed, which the sweeper of the first
process on the restored database ends as `worker_lost`; every log then folds.
docs/guides/deployment.md, "Backup and restore", is this drill for operators."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import openai
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from service.work.sweeper import LOST_MESSAGE
from tests.e2e.cluster import PrivatePostgres, fold_check, start_worker, stop
from tests.e2e.conftest import RESPLOG, start_server, stop_server

SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "2000"}  # some 40 s: cut by the target
TTL = ("--lease-ttl-s", "2")


@pytest.fixture
def archived(tmp_path: Path) -> Iterator[tuple[PrivatePostgres, Path]]:
    cluster = PrivatePostgres(wal_segment_mb=1)
    archive = cluster.root / "archive"
    try:
        cluster.archive_to(archive)
        cluster.start()
        yield cluster, archive
    finally:
        cluster.destroy()


async def _fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


def fetch(dsn: str, sql: str) -> list[asyncpg.Record]:
    return asyncio.run(_fetch(dsn, sql))


def versions(dsn: str) -> dict[str, int]:
    return {r["id"]: r["version"] for r in fetch(dsn, "SELECT id, version FROM responses")}


def until_archived(dsn: str, timeout: float = 30) -> None:
    """Switch to a new WAL segment and wait for the archiver to have copied the old one:
    every commit so far is then in the archive."""
    segment = fetch(dsn, "SELECT pg_walfile_name(pg_switch_wal()) AS s")[0]["s"]
    deadline = time.monotonic() + timeout
    while True:
        done = fetch(dsn, "SELECT last_archived_wal AS w FROM pg_stat_archiver")[0]["w"]
        if done is not None and done >= segment:
            return
        assert time.monotonic() < deadline, f"{segment} never archived (at {done})"
        time.sleep(0.05)


def until_promoted(dsn: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while fetch(dsn, "SELECT pg_is_in_recovery() AS r")[0]["r"]:
        assert time.monotonic() < deadline, "the restore never reached its target"
        time.sleep(0.05)


def verify(url: str, *checkpoint: str) -> subprocess.CompletedProcess[str]:
    command = [RESPLOG, "verify", "--all", "--database-url", url, *checkpoint]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def signing_keys(folder: Path) -> tuple[Path, Path]:
    """An Ed25519 key pair as PEM files, as `openssl genpkey -algorithm ed25519` writes them."""
    key = Ed25519PrivateKey.generate()
    private, public = folder / "signing.pem", folder / "signing.pub.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return private, public


def test_a_point_in_time_restore_mid_stream_verifies_and_ends_the_cut_streams(
    archived: tuple[PrivatePostgres, Path], tmp_path: Path
) -> None:
    primary, archive = archived
    backup = primary.root / "backup"  # the postgres user's, as the archive
    signing, public = signing_keys(tmp_path)
    checkpoint = tmp_path / "checkpoint.json"
    subprocess.run([RESPLOG, "migrate", "--database-url", primary.url()], check=True)
    server = start_server(primary.url(), "postgres", tmp_path / "server.log", *TTL, migrate=False)
    try:
        client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)
        before = [client.responses.create(model="scripted", input="before") for _ in range(3)]
        cut = [
            client.responses.create(model="scripted", input="cut", background=True, metadata=SLOW)
            for _ in range(3)
        ]
        primary.base_backup(backup)  # while the three stream
        time.sleep(1.0)  # they stream on past the backup, into the archived WAL
        # Signed before the target, while the three stream: the restored log must extend it.
        command = ["checkpoint", "--signing-key", str(signing), "--out", str(checkpoint)]
        subprocess.run([RESPLOG, *command, "--database-url", primary.url()], check=True)
        low = versions(primary.dsn())
        target = fetch(primary.dsn(), "SELECT pg_current_wal_lsn()::text AS l")[0]["l"]
        high = versions(primary.dsn())
        time.sleep(0.5)
        after = client.responses.create(model="scripted", input="after the target")
        until_archived(primary.dsn())
    finally:
        stop_server(server)

    recovery = (
        f"restore_command = 'cp {archive}/%f %p'\n"
        f"recovery_target_lsn = '{target}'\n"
        "recovery_target_action = 'promote'\n"
    )
    restored = PrivatePostgres(backup=backup, recovery=recovery)
    try:
        restored.start()
        until_promoted(restored.dsn())
        got = versions(restored.dsn())
        assert after.id not in got  # committed after the target: not restored
        for response in before:
            assert got[response.id] == low[response.id]  # whole, as before the target
        for response in cut:  # where they were at the target: mid-stream
            assert low[response.id] <= got[response.id] <= high[response.id]
            assert got[response.id] > 3  # some deltas of each made it
        statuses = {
            r["id"]: r["status"] for r in fetch(restored.dsn(), "SELECT id, status FROM responses")
        }
        assert {statuses[r.id] for r in cut} == {"in_progress"}

        checked = verify(restored.url())
        assert checked.returncode == 0, checked.stdout + checked.stderr
        # Consistent with the last checkpoint taken before the recovery point: every stream it
        # recorded is there, at least as long, its chain through the digest it signed.
        against = ("--checkpoint", str(checkpoint), "--public-key", str(public))
        checked = verify(restored.url(), *against)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        recorded = json.loads(checkpoint.read_text())["leaves"]
        assert {r.id for r in [*before, *cut]} <= {leaf[0] for leaf in recorded}

        # The first process on the restored database: its sweeper finds the cut streams'
        # leases lapsed (their owner is gone) and ends them.
        worker = start_worker(restored.url(), tmp_path / "worker.log", *TTL)
        try:
            deadline = time.monotonic() + 30
            while {r["status"] for r in fetch(restored.dsn(), "SELECT status FROM responses")} & {
                "in_progress",
                "queued",
            }:
                assert time.monotonic() < deadline, worker.log_text()
                time.sleep(0.1)
        finally:
            stop(worker.process, worker.log_file)

        folded = fold_check(restored.url())
        for response in cut:
            assert (folded.status[response.id], folded.reason[response.id]) == (
                "failed",
                "worker_lost",
            )
        ended = fetch(restored.dsn(), "SELECT snapshot FROM responses WHERE status = 'failed'")
        assert all(LOST_MESSAGE in row["snapshot"] for row in ended)
    finally:
        restored.destroy()
