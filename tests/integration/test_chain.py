"""The hash chain and signed checkpoints through the real CLI (`resplog checkpoint`,
`resplog verify --all --checkpoint`, `--file`), on PostgreSQL and SQLite: every way of
tampering with the log that docs/guides/auditing.md lists is caught and named."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import make_url

from adapters.sealing.ed25519 import verifier as public_key
from adapters.store.conversations import SqlConversations
from adapters.store.factory import open_store
from adapters.store.ledger import SqlLedger
from adapters.store.migrate import upgrade
from adapters.store.sql import SqlEventStore
from adapters.store.writer import GroupCommitWriter
from domain import chain
from domain.conversations import ConversationObject
from domain.errors import ArchiveError
from service.audit.archive import chain_rows
from service.audit.chain import check_rows
from service.audit.signing import read
from tests.conftest import _admin
from tests.integration.chained import REPO, checkpoint_file, pem, resplog
from tests.integration.streams import script

_EDIT_FIRST = (
    "UPDATE events SET facts = replace(facts, 'Hi', 'Yo') WHERE stream_id = :s AND position = 0"
)


class Log:
    """A test's own copy of the corpus (`corpus`), its key pair and its checkpoint."""

    def __init__(self, url: str, tmp: Path, ids: list[str], conversation: str) -> None:
        self.url = url
        self.tmp = tmp
        self.ids = ids
        self.conversation = conversation
        self.key = tmp / "key.pem"
        self.pub = tmp / "pub.pem"
        self.checkpoint = tmp / "cp.json"

    def copy(self, url: str, tmp: Path) -> Log:
        made = Log(url, tmp, self.ids, self.conversation)
        for path in ("key", "pub", "checkpoint"):
            shutil.copyfile(getattr(self, path), getattr(made, path))
        return made

    def verify(self, *extra: str) -> subprocess.CompletedProcess[str]:
        return resplog(
            "verify",
            "--all",
            "--checkpoint",
            str(self.checkpoint),
            "--public-key",
            str(self.pub),
            "--database-url",
            self.url,
            *extra,
        )


async def _write(url: str, n: int = 3) -> tuple[list[str], str]:
    store = await open_store(url)
    ids: list[str] = []
    try:
        async with GroupCommitWriter(store) as writer:
            for _ in range(n):
                appends = script(deltas=4)
                rid = appends[0][1][0].response.id  # type: ignore[union-attr]
                ids.append(rid)
                for expected, events in appends:
                    await writer.append(rid, expected, events)
        conversations = SqlConversations(store)
        cid = "conv_" + os.urandom(8).hex()
        now = time.time()
        await conversations.create(ConversationObject(id=cid, created_at=int(now)), "o", [], now)
        await conversations.update(cid, {"k": "v"}, now)
    finally:
        await store.close()
    return ids, cid


def _corpus(url: str, tmp: Path) -> Log:
    """Three responses and a conversation, a key pair, a checkpoint of them."""
    upgrade(url)
    ids, cid = asyncio.run(_write(url))
    made = Log(url, tmp, ids, cid)
    private, public = pem(Ed25519PrivateKey.generate())
    made.key.write_bytes(private)
    made.pub.write_bytes(public)
    asyncio.run(checkpoint_file(url, made.checkpoint, made.key))
    return made


@pytest.fixture(scope="session")
def pg_corpus(fresh_pg: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> Log:
    return _corpus(fresh_pg(), tmp_path_factory.mktemp("pg-corpus"))


@pytest.fixture(scope="session")
def sqlite_corpus(tmp_path_factory: pytest.TempPathFactory) -> Log:
    tmp = tmp_path_factory.mktemp("sqlite-corpus")
    return _corpus(f"sqlite+aiosqlite:///{tmp / 'corpus.db'}", tmp)


def _sqlite_copy(corpus: Log, tmp_path: Path) -> Log:
    path = tmp_path / "log.db"
    shutil.copyfile(make_url(corpus.url).database or "", path)
    return corpus.copy(f"sqlite+aiosqlite:///{path}", tmp_path)


@pytest.fixture
def one_log(sqlite_corpus: Log, tmp_path: Path) -> Log:
    """A copy on SQLite alone, for what does not depend on the database (keys, files)."""
    return _sqlite_copy(sqlite_corpus, tmp_path)


@pytest.fixture(params=["postgres", "sqlite"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Log]:
    """A copy of the corpus of this test's own: PostgreSQL's made from the corpus as a
    template (a file copy; no migration, no writes), SQLite's a copy of the file."""
    if request.param == "sqlite":
        yield _sqlite_copy(request.getfixturevalue("sqlite_corpus"), tmp_path)
        return
    corpus: Log = request.getfixturevalue("pg_corpus")
    name = f"resplog_test_{secrets.token_hex(6)}"
    template = make_url(corpus.url).database
    asyncio.run(_admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    try:
        yield corpus.copy(make_url(corpus.url).set(database=name).render_as_string(False), tmp_path)
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def sql(url: str, statement: str, **params: Any) -> list[Any]:
    store = await open_store(url)
    try:
        async with store.engine.begin() as conn:
            result = await conn.execute(sa.text(statement), params)
            return list(result) if result.returns_rows else []
    finally:
        await store.close()


async def rechain(url: str, stream_id: str, table: str = "responses") -> None:
    """What a careful forger does after changing a stream: every digest recomputed from
    the bytes as they now are, and the row's head and version (in `table`) set to match."""
    store: SqlEventStore = await open_store(url)
    try:
        rows = [r for page in [p async for p in SqlLedger(store).rows([stream_id])] for r in page]
        previous, last = chain.GENESIS, -1
        async with store.engine.begin() as conn:
            for row in rows:
                content = chain.content(row.data, row.facts)
                previous = chain.link(previous, stream_id, row.position, row.type, content)
                last = row.position
                await conn.execute(
                    sa.text("UPDATE events SET digest = :d WHERE stream_id = :s AND position = :p"),
                    {"d": previous.hex(), "s": stream_id, "p": row.position},
                )
            await conn.execute(
                sa.text(f"UPDATE {table} SET head_digest = :d, version = :v WHERE id = :s"),
                {"d": previous.hex(), "v": last, "s": stream_id},
            )
    finally:
        await store.close()


def findings(result: subprocess.CompletedProcess[str], kind: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if f": {kind}: " in line]


async def test_an_untouched_log_verifies_against_its_checkpoint(log: Log) -> None:
    result = log.verify()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "chain: ok:" in result.stdout


async def test_checkpoint_command_writes_a_signed_checkpoint(log: Log) -> None:
    out = log.tmp / "cli.json"
    made = resplog(
        "checkpoint", "--signing-key", str(log.key), "--out", str(out), "--database-url", log.url
    )
    assert made.returncode == 0, made.stderr
    checkpoint = read(out.read_bytes(), public_key(log.pub.read_bytes()))
    assert checkpoint.statement.streams == len(log.ids) + 1
    again = resplog(
        "checkpoint", "--signing-key", str(log.key), "--out", str(out), "--database-url", log.url
    )
    assert again.returncode == 1 and "exists" in again.stderr


async def test_edited_bytes_are_named(log: Log) -> None:
    rid = log.ids[1]
    await sql(
        log.url,
        _EDIT_FIRST,
        s=rid,
    )
    result = log.verify()
    assert result.returncode == 1
    assert any(f"{rid} @0: chain:" in line for line in findings(result, "chain")), result.stdout


async def test_edited_bytes_with_every_digest_recomputed_are_caught_by_the_checkpoint(
    log: Log,
) -> None:
    rid = log.ids[0]
    await sql(
        log.url,
        _EDIT_FIRST,
        s=rid,
    )
    await rechain(log.url, rid)
    result = log.verify()
    assert result.returncode == 1
    assert not findings(result, "chain"), result.stdout  # the forger's chain holds together
    assert any(rid in line for line in findings(result, "checkpoint")), result.stdout


async def test_an_inserted_event_is_named(log: Log) -> None:
    rid = log.ids[2]
    # Make room at position 2 (later ones move up one), then insert a forged delta there.
    rows = await sql(
        log.url, "SELECT position FROM events WHERE stream_id = :s ORDER BY position DESC", s=rid
    )
    for (position,) in rows:
        if position >= 2:
            await sql(
                log.url,
                "UPDATE events SET position = position + 1 WHERE stream_id = :s AND position = :p",
                s=rid,
                p=position,
            )
    await sql(
        log.url,
        "INSERT INTO events (stream_id, position, type, data, facts, recorded_at, digest) "
        "SELECT stream_id, 2, type, data, facts, recorded_at, digest FROM events "
        "WHERE stream_id = :s AND position = 4",
        s=rid,
    )
    result = log.verify()
    assert result.returncode == 1
    assert any(f"{rid} @2: chain:" in line for line in findings(result, "chain")), result.stdout


async def test_a_deleted_event_is_named(log: Log) -> None:
    rid = log.ids[0]
    await sql(log.url, "DELETE FROM events WHERE stream_id = :s AND position = 2", s=rid)
    result = log.verify()
    assert result.returncode == 1
    assert any(f"{rid} @3: chain:" in line for line in findings(result, "chain")), result.stdout


async def test_reordered_events_are_named(log: Log) -> None:
    rid = log.ids[1]
    a, b = await sql(
        log.url,
        "SELECT data FROM events WHERE stream_id = :s AND position IN (2, 3) ORDER BY position",
        s=rid,
    )
    for position, (data,) in ((2, b), (3, a)):
        await sql(
            log.url,
            "UPDATE events SET data = :d WHERE stream_id = :s AND position = :p",
            d=data,
            s=rid,
            p=position,
        )
    result = log.verify()
    assert result.returncode == 1
    assert any(f"{rid} @2: chain:" in line for line in findings(result, "chain")), result.stdout


async def test_a_truncated_stream_is_named(log: Log) -> None:
    rid = log.ids[2]
    await sql(log.url, "DELETE FROM events WHERE stream_id = :s AND position > 3", s=rid)
    await rechain(log.url, rid)  # row version and head set back consistently
    result = log.verify()
    assert result.returncode == 1
    assert not findings(result, "chain"), result.stdout
    truncated = findings(result, "truncated")
    assert any(rid in line and "the log ends at 3" in line for line in truncated), result.stdout


async def test_a_removed_stream_is_named(log: Log) -> None:
    rid = log.ids[0]
    await sql(log.url, "DELETE FROM events WHERE stream_id = :s", s=rid)
    await sql(log.url, "DELETE FROM responses WHERE id = :s", s=rid)
    result = log.verify()
    assert result.returncode == 1
    assert any(rid in line for line in findings(result, "removed")), result.stdout


async def test_a_stream_rewritten_whole_with_a_fresh_chain_is_named(log: Log) -> None:
    rid = log.ids[1]
    await sql(
        log.url,
        "UPDATE events SET facts = replace(facts, 'Hi', 'Yo'), recorded_at = recorded_at + 1 "
        "WHERE stream_id = :s",
        s=rid,
    )
    await sql(
        log.url,
        "UPDATE responses SET snapshot = replace(snapshot, 'Hi', 'Yo') WHERE id = :s",
        s=rid,
    )
    await rechain(log.url, rid)
    result = log.verify()
    assert result.returncode == 1
    assert any(rid in line for line in findings(result, "checkpoint")), result.stdout


async def test_a_checkpoint_whose_signature_does_not_verify_is_refused(log: Log) -> None:
    other = log.tmp / "other.pem"
    other.write_bytes(pem(Ed25519PrivateKey.generate())[1])
    result = resplog(
        "verify", "--all", "--checkpoint", str(log.checkpoint), "--public-key", str(other),
        "--database-url", log.url,
    )  # fmt: skip
    assert result.returncode == 1
    assert "signature does not verify" in result.stderr
    forged = log.tmp / "forged.json"
    forged.write_bytes(log.checkpoint.read_bytes().replace(b'"streams\\":4', b'"streams\\":5'))
    result = resplog(
        "verify", "--all", "--checkpoint", str(forged), "--public-key", str(log.pub),
        "--database-url", log.url,
    )  # fmt: skip
    assert result.returncode == 1 and "signature does not verify" in result.stderr


async def test_bad_key_and_checkpoint_files_are_one_clear_error(one_log: Log) -> None:
    junk = one_log.tmp / "junk"
    junk.write_text("not a key")
    for args in (
        ("checkpoint", "--signing-key", str(junk)),
        ("checkpoint", "--signing-key", str(one_log.pub)),
        ("verify", "--all", "--checkpoint", str(junk), "--public-key", str(one_log.pub)),
        ("verify", "--all", "--checkpoint", str(one_log.checkpoint), "--public-key", str(junk)),
    ):
        result = resplog(*args, "--database-url", one_log.url)
        assert result.returncode == 1, args
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


async def test_two_checkpoints_are_consistent_unless_the_later_dropped_a_stream(
    one_log: Log,
) -> None:
    later = one_log.tmp / "later.json"
    await _write(one_log.url, 1)
    await checkpoint_file(one_log.url, later, one_log.key)
    both = ("--checkpoint", str(one_log.checkpoint), "--checkpoint", str(later))
    result = resplog("verify", *both, "--public-key", str(one_log.pub))
    assert result.returncode == 0, result.stdout + result.stderr
    assert one_log.verify("--checkpoint", str(later)).returncode == 0
    rid = one_log.ids[0]
    await sql(one_log.url, "DELETE FROM events WHERE stream_id = :s", s=rid)
    await sql(one_log.url, "DELETE FROM responses WHERE id = :s", s=rid)
    dropped = one_log.tmp / "dropped.json"
    await checkpoint_file(one_log.url, dropped, one_log.key)
    result = resplog("verify", "--checkpoint", str(later), "--checkpoint", str(dropped),
                     "--public-key", str(one_log.pub))  # fmt: skip
    assert result.returncode == 1
    assert any(rid in line for line in findings(result, "inconsistent")), result.stdout


async def test_an_export_verifies_offline_and_its_edits_do_not(log: Log) -> None:
    export = log.tmp / "export.jsonl"
    done = resplog("export", "--database-url", log.url)
    assert done.returncode == 0, done.stderr
    export.write_text(done.stdout)
    offline = ("--checkpoint", str(log.checkpoint), "--public-key", str(log.pub))
    result = resplog("verify", "--file", str(export), *offline)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = export.read_bytes().splitlines(keepends=True)
    edited = log.tmp / "edited.jsonl"
    at = next(i for i, line in enumerate(lines) if b'"Hi' in line)
    lines[at] = lines[at].replace(b'"Hi', b'"Yo', 1)
    edited.write_bytes(b"".join(lines))
    result = resplog("verify", "--file", str(edited), *offline)
    assert result.returncode == 1
    assert findings(result, "chain"), result.stdout
    # A whole stream's lines taken out: the file no longer adds up to its end line.
    gone = log.ids[0].encode()
    short = log.tmp / "short.jsonl"
    kept = [line for line in export.read_bytes().splitlines(keepends=True) if gone not in line]
    short.write_bytes(b"".join(kept))
    result = resplog("verify", "--file", str(short), *offline)
    assert result.returncode == 1 and "lines were removed" in result.stderr, result.stderr


@pytest.fixture
async def exported(one_log: Log) -> tuple[list[bytes], Any]:
    log = one_log
    export = log.tmp / "export.jsonl"
    done = resplog("export", "--database-url", log.url)
    assert done.returncode == 0, done.stderr
    export.write_text(done.stdout)
    checkpoint = read(log.checkpoint.read_bytes(), public_key(log.pub.read_bytes()))
    return export.read_bytes().splitlines(keepends=True), checkpoint


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_one_byte_changed_in_an_exports_content_fails_offline_verification(
    exported: tuple[list[bytes], Any], data: st.DataObject
) -> None:
    lines, checkpoint = exported
    events = [i for i, line in enumerate(lines) if line.startswith(b'{"kind":"event"')]
    at = data.draw(st.sampled_from(events))
    line = lines[at]
    # A byte of the event's content: anywhere in its data or facts (as the file holds
    # them, JSON strings), the quotes that delimit them aside.
    start = line.index(b'"data":') + len(b'"data":"')
    end = line.index(b',"recorded_at"') - 1
    offset = data.draw(st.integers(start, end - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != line[offset]))
    changed = line[:offset] + bytes([new]) + line[offset + 1 :]
    try:
        rows = list(chain_rows([*lines[:at], changed, *lines[at + 1 :]]))
    except ArchiveError:
        return  # no longer an export line at all: refused, which is failing too
    report = asyncio.run(check_rows([rows], None, [checkpoint], complete=False))
    assert not report.ok


VERIFIER = REPO / "docs" / "guides" / "verify_proof.py"


def _standalone(proof: Path, checkpoint: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(VERIFIER), str(proof), str(checkpoint), str(pub)],
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_a_proof_checks_with_the_standalone_verifier_alone(one_log: Log) -> None:
    rid = one_log.ids[1]
    made = resplog(
        "prove", rid, "--checkpoint", str(one_log.checkpoint), "--database-url", one_log.url
    )
    assert made.returncode == 0, made.stderr
    proof = one_log.tmp / "proof.json"
    proof.write_text(made.stdout)
    checked = _standalone(proof, one_log.checkpoint, one_log.pub)
    assert checked.returncode == 0 and checked.stdout.strip() == "included", checked.stdout
    # Against another checkpoint, another key, or a leaf changed: refused, saying why.
    later = one_log.tmp / "later.json"
    await _write(one_log.url, 1)
    await checkpoint_file(one_log.url, later, one_log.key)
    other = one_log.tmp / "other.pem"
    other.write_bytes(pem(Ed25519PrivateKey.generate())[1])
    forged = one_log.tmp / "forged.json"
    forged.write_text(made.stdout.replace('"position":', '"position":1', 1))
    for args, why in (
        ((proof, later, one_log.pub), "another checkpoint"),
        ((proof, one_log.checkpoint, other), "signature"),
        ((forged, one_log.checkpoint, one_log.pub), "not in the checkpoint's tree"),
    ):
        refused = _standalone(*args)
        assert refused.returncode == 1 and why in refused.stdout, refused.stdout
    # A response the checkpoint does not hold (made after it): one clear error.
    store = await open_store(one_log.url)
    try:
        newer = {h.stream_id for h in await SqlLedger(store).heads()} - set(one_log.ids)
    finally:
        await store.close()
    fresh = next(s for s in newer if s.startswith("resp_"))
    missing = resplog(
        "prove", fresh, "--checkpoint", str(one_log.checkpoint), "--database-url", one_log.url
    )
    assert missing.returncode == 1 and "is not in the checkpoint" in missing.stderr


@pytest.fixture(params=["postgres", "sqlite"])
def migrated(request: pytest.FixtureRequest, fresh_pg: Callable[[], str]) -> str:
    """An empty database of the test's own, at the newest revision."""
    if request.param == "sqlite":
        return str(request.getfixturevalue("fresh_sqlite"))
    url = fresh_pg()
    upgrade(url)
    return url


async def test_the_migration_backfills_the_chain_the_writer_writes(migrated: str) -> None:
    """Written with the chain, the chain dropped (downgrade to 0010) and backfilled (upgrade
    again): every digest and head comes back as the writer wrote it, blobs included."""
    from adapters.store.migrate import downgrade_async, upgrade_async
    from tests.integration.test_erase import _write as write_with_blobs

    url = migrated
    await write_with_blobs(url)
    query = "SELECT stream_id, position, digest FROM events ORDER BY 1, 2"
    heads = (
        "SELECT id, head_digest FROM responses UNION ALL SELECT id, head_digest FROM conversations"
    )
    before = (await sql(url, query), sorted(await sql(url, heads)))
    assert all(row[2] for row in before[0])
    await downgrade_async(url, "0010")
    await upgrade_async(url)
    assert (await sql(url, query), sorted(await sql(url, heads))) == before


async def test_content_replaced_under_a_kept_digest_without_an_erasure_is_named(
    one_log: Log,
) -> None:
    """What erasure alone may do (bytes gone, their digest kept) done by hand is caught."""
    rid = one_log.ids[0]
    rows = await sql(
        one_log.url, "SELECT data, facts FROM events WHERE stream_id = :s AND position = 0", s=rid
    )
    kept = chain.content(rows[0][0].encode(), rows[0][1].encode()).hex()
    await sql(
        one_log.url,
        "UPDATE events SET content_digest = :c, facts = replace(facts, 'Hi', 'Yo') "
        "WHERE stream_id = :s AND position = 0",
        c=kept,
        s=rid,
    )
    result = one_log.verify()
    assert result.returncode == 1
    assert any(f"{rid} @0: erased:" in line for line in findings(result, "erased")), result.stdout


PNG = "data:image/png;base64," + "A" * 8000  # stored as a blob


def _add_prompt(url: str, tmp: Path, *args: str) -> str:
    """`resplog prompts add` with a template holding an image (a blob); its id."""
    template = tmp / f"template_{secrets.token_hex(4)}.json"
    message = {"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}
    template.write_text(json.dumps({"instructions": "Be {{tone}}.", "input": [message]}))
    done = resplog("prompts", "add", "--file", str(template), "--database-url", url, *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0]


async def test_prompt_versions_are_chained_and_checkpointed(log: Log) -> None:
    """A template's versions carry digests and its row the head, as any stream's: the chain
    verifies, a checkpoint holds the template, and a version edited is caught, by the
    chain and (rechained by a forger) by the checkpoint."""
    pid = _add_prompt(log.url, log.tmp, "--owner", "alice")
    second = resplog(
        "prompts", "add", "--id", pid, "--owner", "alice", "--instructions", "Be brief.",
        "--database-url", log.url,
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    plain = resplog("verify", "--all", "--chain", "--database-url", log.url)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    later = log.tmp / "later.json"
    await checkpoint_file(log.url, later, log.key)
    taken = read(later.read_bytes(), public_key(log.pub.read_bytes()))
    assert taken.heads()[pid][0] == 1
    against = [*("--checkpoint", str(later), "--public-key", str(log.pub))]
    clean = resplog("verify", "--all", *against, "--database-url", log.url)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    edit = "UPDATE events SET data = replace(data, 'brief', 'rude') WHERE stream_id = :s"
    await sql(log.url, edit, s=pid)
    edited = resplog("verify", "--all", "--chain", "--database-url", log.url)
    assert edited.returncode == 1
    assert [f"{pid} @1: chain:" in line for line in findings(edited, "chain")] == [True]
    await rechain(log.url, pid, "prompts")
    forged = resplog("verify", "--all", *against, "--database-url", log.url)
    assert forged.returncode == 1
    assert any(f"{pid} @1: checkpoint:" in line for line in findings(forged, "checkpoint"))


async def test_the_migration_chains_prompt_versions_written_unchained(
    migrated: str, tmp_path: Path
) -> None:
    """A template's versions written with no digests (as before templates were chained)
    get, from the migration, the digests and head the writer writes, blobs included."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from adapters.store.migrate import downgrade_async, upgrade_async

    url = migrated
    pid = _add_prompt(url, tmp_path)
    again = resplog("prompts", "add", "--id", pid, "--instructions", "v2", "--database-url", url)
    assert again.returncode == 0, again.stderr
    query = "SELECT position, digest FROM events WHERE stream_id = :s ORDER BY position"
    head = "SELECT version, head_digest FROM prompts WHERE id = :s"
    before = (await sql(url, query, s=pid), await sql(url, head, s=pid))
    assert len(before[0]) == 2 and all(d for _, d in before[0]) and before[1][0][1]
    await downgrade_async(url, "0013")
    engine = create_async_engine(url)  # the store opens only a database at the head
    try:
        async with engine.begin() as conn:
            unchain = "UPDATE events SET digest = NULL WHERE stream_id = :s"
            await conn.execute(sa.text(unchain), {"s": pid})
    finally:
        await engine.dispose()
    await upgrade_async(url)
    assert (await sql(url, query, s=pid), await sql(url, head, s=pid)) == before
    verified = resplog("verify", "--all", "--chain", "--database-url", url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
