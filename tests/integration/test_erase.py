"""`resplog erase` through the real CLI: the content of a response (and a conversation)
is gone from every read and from a `pg_dump` of the database, the chain still verifies
against a checkpoint taken before, a continuation of it is refused, and the bad inputs
are one clear error each."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.engine import make_url

from adapters.store.conversations import SqlConversations
from adapters.store.factory import open_store
from adapters.store.writer import GroupCommitWriter
from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create
from domain.conversations import ConversationObject
from domain.errors import InvalidRequest
from domain.events import RequestFacts
from domain.generation import (
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    InputDelta,
    ReasoningDelta,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import InputImage, InputMessage, InputText, ResponseObject
from service.prompts.history import _turn
from tests.integration.chained import checkpoint_file, pem, resplog
from tests.integration.streams import created, new_id, script

SECRETS = {
    "input": "zebra-input-8812",
    "instructions": "zebra-instructions-8812",
    "metadata": "zebra-metadata-8812",
    "reasoning": "zebra-reasoning-8812",
    "output": "zebra-output-8812",
    "arguments": "zebra-arguments-8812",
    "image": "zebraimage8812",
    "conversation": "zebra-conversation-8812",
}
IMAGE = "data:image/png;base64," + SECRETS["image"] * 600  # over the blob threshold


async def _write(url: str) -> tuple[str, str, str]:
    """A response holding every kind of content, another of someone else, a conversation."""
    rid = new_id()
    response = ResponseObject(
        id=rid,
        created_at=int(time.time()),
        status="in_progress",
        model="m",
        instructions=SECRETS["instructions"],
        metadata={"topic": SECRETS["metadata"]},
    )
    question = InputMessage(
        id=f"msg_{rid}",
        role="user",
        content=[InputText(text=SECRETS["input"]), InputImage(image_url=IMAGE)],
    )
    decision = create(response, RequestFacts(owner="alice", input=[question]))
    appends = [(-1, decision.events)]
    state = decision.state
    for delta in (
        ReasoningDelta(text=SECRETS["reasoning"]),
        EndItem(),
        TextDelta(text=SECRETS["output"]),
        EndItem(),
        FunctionCallStart(name="lookup", call_id="call_1"),
        ArgumentsDelta(text='{"q":"' + SECRETS["arguments"] + '"}'),
        EndItem(),
    ):
        decision = emit(state, delta)
        appends.append((state.version, decision.events))
        state = decision.state
    decision = finish(state, Finished(reason="stop", usage=TokenUsage(input_tokens=7)), now=1)
    appends.append((state.version, decision.events))
    other = script(owner="bob")
    oid = other[0][1][0].response.id  # type: ignore[union-attr]
    store = await open_store(url)
    try:
        async with GroupCommitWriter(store) as writer:
            for sid, stream in ((rid, appends), (oid, other)):
                for expected, events in stream:
                    await writer.append(sid, expected, events)
        cid = "conv_" + os.urandom(8).hex()
        now = time.time()
        conversation = ConversationObject(
            id=cid, created_at=int(now), metadata={"about": SECRETS["conversation"]}
        )
        item = InputMessage(
            id=f"msg_{cid}", role="user", content=[InputText(text=SECRETS["conversation"])]
        )
        await SqlConversations(store).create(conversation, "alice", [item], now)
    finally:
        await store.close()
    return rid, oid, cid


@pytest.fixture
def pg(fresh_pg: object) -> str:
    from adapters.store.migrate import upgrade

    url = fresh_pg()  # type: ignore[operator]
    upgrade(url)
    return str(url)


def _dump(url: str) -> str:
    parsed = make_url(url)
    dsn = f"postgresql://{parsed.username or 'postgres'}@{parsed.host}:{parsed.port or 5432}"
    done = subprocess.run(
        ["pg_dump", "--data-only", f"{dsn}/{parsed.database}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


async def test_erase_removes_the_content_and_keeps_the_proof(pg: str, tmp_path: Path) -> None:
    rid, oid, cid = await _write(pg)
    before = _dump(pg)
    assert all(secret in before for secret in SECRETS.values())  # the search can find them
    private, public = pem(Ed25519PrivateKey.generate())
    key, pub, checkpoint = tmp_path / "k.pem", tmp_path / "p.pem", tmp_path / "cp.json"
    key.write_bytes(private)
    pub.write_bytes(public)
    await checkpoint_file(pg, checkpoint, key)

    done = resplog("erase", rid, "--reason", "GDPR Art. 17 request #42", "--database-url", pg)
    assert done.returncode == 0, done.stderr
    assert f"{rid}: erased" in done.stdout
    done = resplog("erase", "--conversation", cid, "--reason", "request #42", "--database-url", pg)
    assert done.returncode == 0, done.stderr

    after = _dump(pg)
    assert [s for s in SECRETS.values() if s in after] == []
    assert "GDPR Art. 17 request #42" in after  # the why is kept

    verified = resplog(
        "verify", "--all", "--checkpoint", str(checkpoint), "--public-key", str(pub),
        "--database-url", pg,
    )  # fmt: skip
    assert verified.returncode == 0, verified.stdout + verified.stderr

    # Every read still works and shows the erasure, items and lifecycle in place.
    events = resplog("events", rid, "--raw", "--database-url", pg)
    assert events.returncode == 0, events.stderr
    assert "[erased]" in events.stdout and '"input_tokens":7' in events.stdout
    assert '"type":"function_call"' in events.stdout
    exported = resplog("export", "--database-url", pg)
    assert exported.returncode == 0, exported.stderr
    export = tmp_path / "export.jsonl"
    export.write_text(exported.stdout)
    offline = resplog(
        "verify", "--file", str(export), "--checkpoint", str(checkpoint), "--public-key", str(pub)
    )
    assert offline.returncode == 0, offline.stdout + offline.stderr
    shown = resplog("responses", "show", rid, "--database-url", pg)
    assert shown.returncode == 0, shown.stderr
    store = await open_store(pg)
    try:
        for stored in await store.read(rid):
            stored.event()  # decodes
        links = await store.chain(rid, "alice", 5)
        assert links[0].erased
        # Each erasure (the response's, the conversation's) raised the chain-break count of
        # this fresh database, so no process continues a chain through the response from
        # its cache (service/prompts/chains.py).
        tip = await store.chain_tip(rid, "alice")
        assert tip.link == links[0] and tip.breaks == 2
        with pytest.raises(InvalidRequest) as info:
            _turn(links[0], rid)
        assert info.value.code == "previous_response_erased"
        assert not (await store.chain(oid, "bob", 5))[0].erased
    finally:
        await store.close()

    again = resplog("erase", rid, "--reason", "again", "--database-url", pg)
    assert again.returncode == 0 and "already erased" in again.stdout


async def test_erase_refuses_bad_input_in_one_line(pg: str) -> None:
    rid, _, _ = await _write(pg)
    running = script(end="open")
    sid = running[0][1][0].response.id  # type: ignore[union-attr]
    store = await open_store(pg)
    try:
        for expected, events in running:
            await store.append(sid, expected, events)
    finally:
        await store.close()
    for args in (
        ("resp_nope", "--reason", "x"),
        (sid, "--reason", "x"),
        (rid, "--reason", " "),
        ("--conversation", "conv_nope", "--reason", "x"),
    ):
        result = resplog("erase", *args, "--database-url", pg)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "cancel it first" in resplog("erase", sid, "--reason", "x", "--database-url", pg).stderr
    # Nothing was erased by the refused calls.
    assert "zebra-output-8812" in _dump(pg)


async def test_erase_on_sqlite_keeps_the_chain(fresh_sqlite: str, tmp_path: Path) -> None:
    rid, _, cid = await _write(fresh_sqlite)
    done = resplog(
        "erase", "--owner", "alice", "--reason", "retention", "--database-url", fresh_sqlite
    )
    assert done.returncode == 0, done.stderr
    assert rid in done.stdout and cid in done.stdout
    verified = resplog("verify", "--all", "--chain", "--database-url", fresh_sqlite)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    raw = _file_bytes(fresh_sqlite)
    assert [s for s in SECRETS.values() if s.encode() in raw] == []


def _file_bytes(url: str) -> bytes:
    """The SQLite file's bytes and its write-ahead log's: all that is on the disk."""
    path = make_url(url).database
    assert path is not None
    wal = Path(path + "-wal")
    return Path(path).read_bytes() + (wal.read_bytes() if wal.exists() else b"")


async def _write_split(url: str) -> str:
    """A response whose every kind of streamed content comes in several deltas: reasoning
    text, a summary, the answer, a refusal, function arguments, a custom tool's input, an
    MCP call's arguments, a `python` call's code."""
    decision = created(owner="carol")
    rid = decision.events[0].response.id  # type: ignore[union-attr]
    appends = [(-1, decision.events)]
    state = decision.state
    for delta in (
        ReasoningDelta(text="zebra-"),
        ReasoningDelta(text="reasoning"),
        SummaryDelta(text="zebra-"),
        SummaryDelta(text="summary"),
        EndItem(),
        TextDelta(text="zebra-"),
        TextDelta(text="output"),
        RefusalDelta(text="zebra-"),
        RefusalDelta(text="refusal"),
        EndItem(),
        FunctionCallStart(name="lookup", call_id="call_1"),
        ArgumentsDelta(text='{"q":'),
        ArgumentsDelta(text='"zebra-arguments"}'),
        EndItem(),
        FunctionCallStart(name="patch", custom=True),
        InputDelta(text="zebra-"),
        InputDelta(text="input"),
        EndItem(),
        FunctionCallStart(name="fetch", server_label="docs"),
        ArgumentsDelta(text='{"u":'),
        ArgumentsDelta(text='"zebra-mcp"}'),
        EndItem(),
        FunctionCallStart(name="python", builtin="python"),
        ArgumentsDelta(text="print('zebra-"),
        ArgumentsDelta(text="code')"),
        EndItem(),
    ):
        decision = emit(state, delta)
        appends.append((state.version, decision.events))
        state = decision.state
    decision = finish(state, Finished(reason="stop", usage=TokenUsage(input_tokens=7)), now=1)
    appends.append((state.version, decision.events))
    store = await open_store(url)
    try:
        async with GroupCommitWriter(store) as writer:
            for expected, events in appends:
                await writer.append(rid, expected, events)
    finally:
        await store.close()
    return rid


@pytest.fixture(params=["postgres", "sqlite"])
def either(request: pytest.FixtureRequest) -> str:
    """A migrated database of each store in turn."""
    url: str = request.getfixturevalue("pg" if request.param == "postgres" else "fresh_sqlite")
    return url


async def test_an_erased_stream_of_split_deltas_verifies(either: str) -> None:
    """Each final text, part and item of an erased stream equals what its erased deltas
    fold to, for every kind of delta: `verify --all --chain` finds nothing."""
    url = either
    rid = await _write_split(url)
    before = resplog("verify", "--all", "--chain", "--database-url", url)
    assert before.returncode == 0, before.stdout + before.stderr
    done = resplog("erase", rid, "--reason", "request #7", "--database-url", url)
    assert done.returncode == 0, done.stderr
    verified = resplog("verify", "--all", "--chain", "--database-url", url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    events = resplog("events", rid, "--raw", "--database-url", url)
    assert events.returncode == 0, events.stderr
    assert "zebra" not in events.stdout and "[erased]" in events.stdout
    shown = resplog("responses", "show", rid, "--database-url", url)
    assert shown.returncode == 0 and "zebra" not in shown.stdout, shown.stdout + shown.stderr
