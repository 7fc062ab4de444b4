"""The admin CLI as an operator runs it (a subprocess), on logs that a real `resplog serve`
wrote for the official openai SDK: plain, streamed, background, cancelled, failed (the server
stopped mid-generation), incomplete, unstored, deleted, a multi-turn conversation with a
function call, and one left running by a server killed with SIGKILL."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import openai
import pytest

from adapters.store.migrate import upgrade
from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server

WEATHER: Any = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    }
]
SLOW = {"scripted_delay_ms": "25", "scripted_tokens": "400"}


def resplog(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    db = ("--database-url", url) if url else ()
    return subprocess.run([RESPLOG, *args, *db], capture_output=True, text=True, timeout=60)


def ok_json(*args: str, url: str) -> Any:
    result = resplog(*args, "--json", url=url)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def _pg_dsn(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def _pg(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(_pg_dsn(url))
    try:
        return [tuple(r) for r in await conn.fetch(sql, *args)]
    finally:
        await conn.close()


def sql(url: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    """Rows of a query on either database (`$1` placeholders; SQLite gets `?`)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.split("///", 1)[1]) as db:
            for n in range(len(args), 0, -1):
                query = query.replace(f"${n}", "?")
            return [tuple(r) for r in db.execute(query, args).fetchall()]
    return asyncio.run(_pg(url, query, *args))


def table(url: str, name: str) -> list[tuple[Any, ...]]:
    """Every row of a table, in key order, booleans as integers (SQLite's own form)."""
    order = {
        "responses": "id",
        "conversations": "id",
        "conversation_items": "conversation_id, position, seq",
    }.get(name, "stream_id, position")
    rows = sql(url, f"SELECT * FROM {name} ORDER BY {order}")
    return [tuple(int(v) if isinstance(v, bool) else v for v in row) for row in rows]


def wait_status(client: openai.OpenAI, rid: str, *statuses: str) -> Any:
    for _ in range(400):
        r = client.responses.retrieve(rid)
        if r.status in statuses:
            return r
        time.sleep(0.05)
    raise AssertionError(f"{rid} never reached {statuses}")


def wait_started(http: httpx.Client, rid: str) -> None:
    """Until the log holds generated output (the SDK cannot see inside a running one)."""
    for _ in range(400):
        lines = http.get(
            f"/v1/responses/{rid}/events", params={"format": "jsonl", "follow": "false"}
        )
        if b"output_text.delta" in lines.content or b"reasoning_text.delta" in lines.content:
            return
        time.sleep(0.05)
    raise AssertionError(f"{rid} never started")


# The corpus's conversations (their streams are exported, verified and collected too).
CONVERSATIONS: dict[str, str] = {}


@dataclass
class Corpus:
    url: str
    ids: dict[str, str]
    chain: list[str]  # the conversation, oldest turn first
    usage: dict[str, int]  # the SDK's usage per response id (total tokens)
    replay: bytes  # the server's JSON Lines replay of the streamed response


def _make(client: openai.OpenAI, http: httpx.Client) -> tuple[dict[str, str], list[str], bytes]:
    ids = {"plain": client.responses.create(model="scripted", input="hello there").id}
    streamed = list(client.responses.create(model="scripted", input="stream me", stream=True))
    ids["streamed"] = streamed[0].response.id  # type: ignore[union-attr]
    bg = client.responses.create(model="scripted", input="later", background=True)
    ids["background"] = wait_status(client, bg.id, "completed").id
    slow = client.responses.create(model="scripted", input="x", background=True, metadata=SLOW)
    wait_started(http, slow.id)
    ids["cancelled"] = client.responses.cancel(slow.id).id
    ids["incomplete"] = client.responses.create(
        model="scripted", input="cut", max_output_tokens=16, metadata={"scripted_tokens": "40"}
    ).id
    ids["unstored"] = client.responses.create(model="scripted", input="forget", store=False).id
    ids["deleted"] = client.responses.create(model="scripted", input="delete me").id
    client.responses.delete(ids["deleted"])
    first = client.responses.create(
        model="scripted", input="Weather in Paris?", instructions="Be brief.", tools=WEATHER
    )
    call = next(o for o in first.output if o.type == "function_call")
    second = client.responses.create(
        model="scripted",
        previous_response_id=first.id,
        tools=WEATHER,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    third = client.responses.create(
        model="scripted", previous_response_id=second.id, input="Thanks"
    )
    # A conversation with every kind of change (its streams go into the export too), and
    # one deleted through the API.
    conv = client.conversations.create(items=[{"role": "user", "content": "I am Ada."}])
    client.conversations.update(conv.id, metadata={"topic": "tea"})
    turn = client.responses.create(model="scripted", input="Tea?", conversation=conv.id)
    kept = client.conversations.items.create(
        conv.id, items=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    )
    client.conversations.items.delete(kept.data[0].id, conversation_id=conv.id)
    ids["conversation_turn"] = turn.id
    gone = client.conversations.create()
    client.conversations.delete(gone.id)
    CONVERSATIONS.update(live=conv.id, deleted=gone.id)
    replay = http.get(f"/v1/responses/{ids['streamed']}/events", params={"format": "jsonl"})
    return ids, [first.id, second.id, third.id], replay.content


@pytest.fixture(scope="module")
def corpus(fresh_pg: Callable[[], str], tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    """One PostgreSQL database holding every kind of response the API writes."""
    url = fresh_pg()
    tmp = tmp_path_factory.mktemp("corpus")
    srv = start_server(url, "postgres", tmp / "a.log", "--shutdown-grace-s", "0")
    try:
        with (
            openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="-", max_retries=0) as client,
            httpx.Client(base_url=srv.base_url, timeout=30) as http,
        ):
            ids, chain, replay = _make(client, http)
            usage = {}
            for rid in [*ids.values(), *chain]:
                if rid not in (ids["unstored"], ids["deleted"]):
                    r = client.responses.retrieve(rid)
                    usage[rid] = r.usage.total_tokens if r.usage else 0
            doomed = client.responses.create(
                model="scripted", input="y", background=True, metadata=SLOW
            )
            wait_started(http, doomed.id)
    finally:
        stop_server(srv)  # no grace: the generation still running ends `failed`
    ids["failed"] = doomed.id
    # A short lease, so that the response the kill leaves running is soon a stale one.
    srv = start_server(url, "postgres", tmp / "b.log", "--lease-ttl-s", "1")
    try:
        with (
            openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="-", max_retries=0) as client,
            httpx.Client(base_url=srv.base_url, timeout=30) as http,
        ):
            stuck = client.responses.create(
                model="scripted", input="z", background=True, metadata=SLOW
            )
            wait_started(http, stuck.id)
            srv.process.kill()  # kill -9: nothing ends the response
    finally:
        stop_server(srv)
    time.sleep(1.5)  # its lease has expired: nobody is left to sweep it
    ids["running"] = stuck.id
    return Corpus(url, ids, chain, usage, replay)


@pytest.fixture(scope="module")
def exported(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "log.jsonl"
    with path.open("w") as out:
        result = subprocess.run(
            [RESPLOG, "export", "--database-url", corpus.url],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    assert "skipped 1 response still running" in result.stderr
    return path


def imported_copy(fresh_pg: Callable[[], str], exported: Path) -> str:
    url = fresh_pg()
    upgrade(url)
    result = resplog("import", str(exported), url=url)
    assert result.returncode == 0, result.stderr
    return url


# --- verify -------------------------------------------------------------------------------


def test_verify_passes_on_every_log_the_service_wrote(corpus: Corpus) -> None:
    """No violation; the response a killed server left running is only a warning."""
    report = ok_json("verify", "--all", "--stale-after", "0s", url=corpus.url)
    assert report["ok"] is True and report["violations"] == []
    assert report["streams"] == len(corpus.ids) + len(corpus.chain) + len(CONVERSATIONS)
    assert [(w["stream_id"], w["kind"]) for w in report["warnings"]] == [
        (corpus.ids["running"], "stale")
    ]
    text = resplog("verify", *corpus.ids.values(), "--progress", url=corpus.url)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"ok: {len(corpus.ids)} streams")
    assert "verifying" in text.stderr and "events" in text.stderr  # the progress bar


def test_verify_passes_on_the_live_api_test_databases(server: Server) -> None:
    """Every log the API tests wrote, PostgreSQL and SQLite, read while the server runs."""
    result = resplog("verify", "--all", url=server.database_url)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok: ")


# --- responses list / show ------------------------------------------------------------------


def test_responses_list_filters_and_pages_newest_first(corpus: Corpus) -> None:
    """Status, conversation, owner and time filters; keyset pages that neither overlap nor
    skip."""
    everything = ok_json("responses", "list", "--limit", "100", url=corpus.url)["data"]
    keys = [(r["created_at"], r["id"]) for r in everything]
    assert keys == sorted(keys, reverse=True)
    assert {r["id"] for r in everything} == {*corpus.ids.values(), *corpus.chain}
    failed = ok_json("responses", "list", "--status", "failed", url=corpus.url)["data"]
    assert [r["id"] for r in failed] == [corpus.ids["failed"]]
    chain = ok_json("responses", "list", "--conversation", corpus.chain[0], url=corpus.url)
    assert {r["id"] for r in chain["data"]} == set(corpus.chain)
    assert ok_json("responses", "list", "--owner", "nobody", url=corpus.url)["data"] == []
    assert (
        ok_json("responses", "list", "--since", "1d", "--no-deleted", url=corpus.url)["data"]
        == [r for r in everything if r["id"] != corpus.ids["deleted"]][:20]
    )
    first = ok_json("responses", "list", "--limit", "4", url=corpus.url)
    second = ok_json(
        "responses", "list", "--limit", "4", "--after", first["last_id"], url=corpus.url
    )
    assert first["has_more"] and [r["id"] for r in first["data"] + second["data"]] == [
        r["id"] for r in everything[:8]
    ]
    shown = resplog("responses", "list", "--limit", "2", url=corpus.url)
    assert everything[0]["id"] in shown.stdout and "more: --after" in shown.stderr


def test_responses_show_gives_the_object_moments_durations_and_usage(corpus: Corpus) -> None:
    """From the log: the SDK's usage, ordered moments, the end reason of a failure."""
    plain = ok_json("responses", "show", corpus.ids["plain"], url=corpus.url)
    assert plain["response"]["status"] == "completed"
    assert plain["usage"]["total_tokens"] == corpus.usage[corpus.ids["plain"]]
    m = plain["moments"]
    assert m["created"] <= m["started"] <= m["first_output"] <= m["ended"]
    assert all(v is not None and v >= 0 for v in plain["durations"].values())
    queued = ok_json("responses", "show", corpus.ids["background"], url=corpus.url)
    assert queued["moments"]["queued"] is not None and queued["durations"]["queue_wait"] >= 0
    failed = ok_json("responses", "show", corpus.ids["failed"], url=corpus.url)
    assert failed["end"]["reason"] == "server_shutdown"
    assert failed["response"]["error"]["code"] == "server_error"
    text = resplog("responses", "show", corpus.ids["cancelled"], url=corpus.url).stdout
    assert "time to first token" in text and "cancelled_by_user" in text


# --- events ----------------------------------------------------------------------------------


def test_events_raw_is_byte_for_byte_the_servers_replay(corpus: Corpus) -> None:
    """`--raw` prints each event's stored JSON; the timeline has one line per event."""
    rid = corpus.ids["streamed"]
    raw = resplog("events", rid, "--raw", url=corpus.url)
    assert raw.stdout.encode() == corpus.replay
    count = len(corpus.replay.splitlines())
    lines = resplog("events", rid, url=corpus.url).stdout.splitlines()
    assert len(lines) == count
    assert lines[0].split()[0] == "0" and "response.created" in lines[0]
    assert "response.completed" in lines[-1]
    as_json = [
        json.loads(x) for x in resplog("events", rid, "--json", url=corpus.url).stdout.splitlines()
    ]
    assert [e["position"] for e in as_json] == list(range(count))
    assert as_json[0]["facts"]["owner"] == "anonymous"
    assert as_json[3]["event"] == json.loads(corpus.replay.splitlines()[3])


def test_events_follow_tails_a_live_response_to_its_end(server: Server) -> None:
    """`--follow` prints events as they are committed and stops after the terminal one."""
    with openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0) as client:
        r = client.responses.create(
            model="scripted",
            input="follow me",
            background=True,
            metadata={"scripted_delay_ms": "10", "scripted_tokens": "150"},
        )
        followed = resplog("events", r.id, "--follow", "--raw", url=server.database_url)
        assert followed.returncode == 0, followed.stderr
        replay = httpx.get(
            f"{server.base_url}/v1/responses/{r.id}/events", params={"format": "jsonl"}
        )
    assert followed.stdout.encode() == replay.content
    assert json.loads(followed.stdout.splitlines()[-1])["type"] == "response.completed"


# --- conversation ------------------------------------------------------------------------------


def test_conversation_rebuilds_every_turn_from_the_log(corpus: Corpus) -> None:
    """Instructions, inputs, the function call and its output, answers, usage per turn and
    in total, as text, JSON and Markdown."""
    last = corpus.chain[-1]
    text = resplog("conversation", last, url=corpus.url).stdout
    for part in (
        "instructions: Be brief.",
        "user: Weather in Paris?",
        "function_call get_weather",
        "function_call_output (call_",
        "assistant: The function returned: sunny",
        "user: Thanks",
    ):
        assert part in text
    view = ok_json("conversation", last, url=corpus.url)
    assert [t["response_id"] for t in view["turns"]] == corpus.chain
    assert [t["usage"]["total_tokens"] for t in view["turns"]] == [
        corpus.usage[i] for i in corpus.chain
    ]
    assert view["usage"]["total_tokens"] == sum(corpus.usage[i] for i in corpus.chain)
    md = resplog("conversation", last, "--markdown", url=corpus.url).stdout
    assert md.startswith(f"# Conversation `{last}`") and md.count("\n## Turn ") == 3


# --- export / import ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["postgres", "sqlite"])
def test_export_then_import_reproduces_every_row(
    corpus: Corpus, exported: Path, fresh_pg: Callable[[], str], tmp_path: Path, target: str
) -> None:
    """Every event row and read-model row comes back identical (the running response is
    not exported); importing the same file again is refused and writes nothing."""
    url = fresh_pg() if target == "postgres" else f"sqlite:///{tmp_path / 'copy.db'}"
    upgrade(url)
    result = resplog("import", str(exported), url=url)
    assert result.returncode == 0, result.stderr
    running = corpus.ids["running"]
    source_rows = [r for r in table(corpus.url, "responses") if r[0] != running]
    source_events = [e for e in table(corpus.url, "events") if e[0] != running]
    assert table(url, "responses") == source_rows
    assert table(url, "events") == source_events
    for rows in ("conversations", "conversation_items"):  # rebuilt from their events
        assert table(url, rows) == table(corpus.url, rows) != []
    assert ok_json("verify", "--all", url=url)["ok"] is True
    again = one_error_line(resplog("import", str(exported), url=url))
    assert "already holds" in again and "nothing was imported" in again
    assert len(table(url, "events")) == len(source_events)


def test_export_selects_by_owner_and_time(corpus: Corpus, tmp_path: Path) -> None:
    """Filters narrow the export; the header records them."""
    out = resplog("export", "--owner", "nobody", url=corpus.url).stdout.splitlines()
    assert [json.loads(x)["kind"] for x in out] == ["resplog.export", "end"]
    assert json.loads(out[0])["filters"]["owner"] == "nobody"
    late = resplog("export", "--since", "2999-01-01", url=corpus.url).stdout
    assert json.loads(late.splitlines()[-1]) == {
        "kind": "end",
        "responses": 0,
        "events": 0,
        "conversations": 0,
    }


def test_a_cut_short_export_is_refused_and_writes_nothing(exported: Path, tmp_path: Path) -> None:
    """The last line proves the file is whole; without it nothing is imported."""
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(exported.read_bytes().splitlines(keepends=True)[:-1]))
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    assert "cut short" in one_error_line(resplog("import", str(cut), url=url))
    assert table(url, "responses") == [] and table(url, "events") == []


# --- gc ---------------------------------------------------------------------------------------


def sqlite_copy(tmp_path: Path, exported: Path) -> str:
    """The corpus in the SQLite store, whose one table of events `gc` takes row by row by
    age (PostgreSQL's goes by whole days: `test_partitions.py`)."""
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    upgrade(url)
    result = resplog("import", str(exported), url=url)
    assert result.returncode == 0, result.stderr
    return url


def test_gc_dry_run_lists_what_would_go_and_never_a_running_response(
    corpus: Corpus, exported: Path, tmp_path: Path
) -> None:
    """store=false goes by default; with a retention every ended response; never the running."""
    url = sqlite_copy(tmp_path, exported)
    unstored = ok_json("gc", "--dry-run", url=url)["responses"]
    assert [c["id"] for c in unstored] == [corpus.ids["unstored"]]
    everything = ok_json("gc", "--dry-run", "--older-than", "0s", url=url)["responses"]
    assert {c["id"] for c in everything} == (
        {*corpus.ids.values(), *corpus.chain} - {corpus.ids["running"]}
    )


def test_on_postgresql_an_age_limit_takes_a_response_with_its_whole_day(corpus: Corpus) -> None:
    """The corpus's streams are in their day's partition: a zero retention takes none of
    them one by one (store=false ones still go), and no day that is not over. A day that
    is over goes whole: `test_partitions.py`."""
    dry = ok_json("gc", "--dry-run", "--older-than", "0s", url=corpus.url)
    assert [c["id"] for c in dry["responses"]] == [corpus.ids["unstored"]]
    today = int(time.time() // 86400)
    assert all(d["day"] < today for d in dry["days"])
    where = "SELECT DISTINCT tableoid::regclass::text FROM events"
    assert {r[0] for r in sql(corpus.url, where)} <= {
        "events_legacy",  # the conversations'
        f"events_p{today}",
        f"events_p{today - 1}",  # the module began before midnight
    }


def test_gc_deletes_rows_and_events_in_batches_and_the_log_still_verifies(
    exported: Path, tmp_path: Path
) -> None:
    """Unstored first, then everything past a zero retention; what stays verifies."""
    url = sqlite_copy(tmp_path, exported)
    before = len(table(url, "responses"))
    done = ok_json("gc", url=url)
    assert (done["deleted"], done["batches"]) == (1, 1)
    assert len(table(url, "responses")) == before - 1
    done = ok_json("gc", "--older-than", "0s", "--batch-size", "3", url=url)
    assert done["deleted"] == before - 1 and done["batches"] >= 3
    assert done["conversations"] == 0  # a conversation has no retention
    assert table(url, "responses") == []
    streams = {e[0] for e in table(url, "events")}
    assert streams == set(CONVERSATIONS.values())
    # --deleted takes the conversation deleted through the API: row, items and log.
    dry = ok_json("gc", "--deleted", "--dry-run", url=url)
    assert [c["id"] for c in dry["conversations"]] == [CONVERSATIONS["deleted"]]
    assert ok_json("gc", "--deleted", url=url)["conversations"] == 1
    assert {e[0] for e in table(url, "events")} == {CONVERSATIONS["live"]}
    assert [r[0] for r in table(url, "conversations")] == [CONVERSATIONS["live"]]
    assert ok_json("verify", "--all", url=url)["ok"] is True


# --- verify on damaged logs (one corruption per stream, one test per kind) --------------------


@dataclass
class Damaged:
    url: str
    report: dict[str, Any]
    text: subprocess.CompletedProcess[str]
    last: dict[str, int]  # the last position of each damaged stream before the damage


@pytest.fixture(scope="module")
def damaged(corpus: Corpus, exported: Path, fresh_pg: Callable[[], str]) -> Damaged:
    url = imported_copy(fresh_pg, exported)
    ids = corpus.ids
    last = {
        k: sql(url, "SELECT max(position) FROM events WHERE stream_id = $1", ids[k])[0][0]
        for k in ("plain", "streamed", "background", "incomplete")
    }
    sql(url, "DELETE FROM events WHERE stream_id = $1 AND position = 5", ids["plain"])
    n = last["streamed"]
    sql(
        url,
        "INSERT INTO events SELECT stream_id, position + 1, type, "
        "replace(data, $2, $3), facts, recorded_at FROM events "
        "WHERE stream_id = $1 AND position = $4",
        ids["streamed"],
        f'"sequence_number":{n},',
        f'"sequence_number":{n + 1},',
        n,
    )
    sql(url, "UPDATE responses SET status = 'failed' WHERE id = $1", ids["background"])
    sql(
        url,
        "UPDATE events SET type = 'response.queued', data = replace(data, $2, $3) "
        "WHERE stream_id = $1 AND position = 1",
        ids["incomplete"],
        '"type":"response.in_progress"',
        '"type":"response.queued"',
    )
    result = resplog("verify", "--all", "--json", url=url)
    assert result.returncode == 1, result.stderr
    return Damaged(url, json.loads(result.stdout), resplog("verify", "--all", url=url), last)


def findings(damaged: Damaged, rid: str) -> list[tuple[str, int | None]]:
    return [
        (v["kind"], v["position"]) for v in damaged.report["violations"] if v["stream_id"] == rid
    ]


def test_verify_reports_a_deleted_middle_event(corpus: Corpus, damaged: Damaged) -> None:
    """The missing position is named."""
    assert findings(damaged, corpus.ids["plain"]) == [("gap", 5)]


def test_verify_reports_a_second_terminal_event(corpus: Corpus, damaged: Damaged) -> None:
    """At the position of the second one."""
    assert findings(damaged, corpus.ids["streamed"]) == [("terminal", damaged.last["streamed"] + 1)]


def test_verify_reports_an_edited_read_model_row(corpus: Corpus, damaged: Damaged) -> None:
    """The row's status no longer equals the fold."""
    assert findings(damaged, corpus.ids["background"]) == [
        ("read_model", damaged.last["background"])
    ]


def test_verify_reports_an_illegal_transition(corpus: Corpus, damaged: Damaged) -> None:
    """in_progress rewritten to queued at position 1."""
    assert findings(damaged, corpus.ids["incomplete"]) == [("transition", 1)]


def test_verify_reports_every_violation_with_stream_and_position_and_exits_1(
    damaged: Damaged,
) -> None:
    """All four, one line each, the intact streams untouched; a summary; exit code 1."""
    assert len(damaged.report["violations"]) == 4
    assert damaged.text.returncode == 1
    lines = [x for x in damaged.text.stdout.splitlines() if x.startswith("violation: ")]
    assert len(lines) == 4 and all(" @" in x and "resp_" in x for x in lines)
    assert damaged.text.stdout.splitlines()[-1].startswith("FAILED: ")


def test_verify_in_parallel_parts_finds_what_one_process_finds(damaged: Damaged) -> None:
    """`--jobs N`: the same streams, events and findings, the same lines and exit code, with
    fewer responses than parts too (no empty part)."""

    def key(finding: dict[str, Any]) -> tuple[str, int | None, str]:
        return finding["stream_id"], finding["position"], finding["kind"]

    one = damaged.report
    for jobs in ("3", "50"):
        result = resplog("verify", "--all", "--json", "--jobs", jobs, url=damaged.url)
        assert result.returncode == 1, result.stderr
        got = json.loads(result.stdout)
        assert (got["streams"], got["events"]) == (one["streams"], one["events"])
        assert sorted(map(key, got["violations"])) == sorted(map(key, one["violations"]))
        assert sorted(map(key, got["warnings"])) == sorted(map(key, one["warnings"]))
    text = resplog("verify", "--all", "--jobs", "2", url=damaged.url)
    assert text.returncode == 1
    assert sorted(text.stdout.splitlines()) == sorted(damaged.text.stdout.splitlines())
    refused = resplog("verify", "resp_x", "--jobs", "2", url=damaged.url)
    assert refused.returncode == 2 and "--jobs is for --all" in refused.stderr


# --- errors -------------------------------------------------------------------------------------


def test_every_failure_is_one_clear_line_and_exit_1(corpus: Corpus, tmp_path: Path) -> None:
    """Bad id, no such response, unreachable, unmigrated or missing database."""
    assert "not a response id" in one_error_line(resplog("responses", "show", "x1", url=corpus.url))
    for args in (
        ("events", "resp_missing"),
        ("conversation", "resp_missing"),
        ("verify", "resp_missing"),
    ):
        assert "no response resp_missing" in one_error_line(resplog(*args, url=corpus.url))
    unreachable = resplog("verify", "--all", url="postgresql://nobody@127.0.0.1:1/none")
    assert "cannot use the database" in one_error_line(unreachable)
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).close()
    assert "not migrated" in one_error_line(resplog("export", url=f"sqlite:///{blank}"))
    missing = one_error_line(resplog("responses", "list", url=f"sqlite:///{tmp_path / 'no.db'}"))
    assert "no SQLite database" in missing
    assert not (tmp_path / "no.db").exists()


def test_events_and_export_report_a_damaged_log_and_exit_1(
    corpus: Corpus, damaged: Damaged, tmp_path: Path
) -> None:
    """A hole (or events the row does not count) is never passed over in silence: `events`
    prints up to it, `export` stops before its end line (so `import` refuses the file), and
    both name the stream and `resplog verify` in one line."""
    plain = corpus.ids["plain"]
    shown = resplog("events", plain, url=damaged.url)
    line = one_error_line(shown)
    assert line == (
        f"error: the log of {plain} is damaged: position 6 where 5 was due "
        f"(see resplog verify {plain})"
    )
    assert [int(x.split()[0]) for x in shown.stdout.splitlines()] == [0, 1, 2, 3, 4]
    streamed = corpus.ids["streamed"]
    n = damaged.last["streamed"]
    line = one_error_line(resplog("events", streamed, url=damaged.url))
    assert f"damaged: {n + 2} events where its row counts {n + 1}" in line
    exported = resplog("export", url=damaged.url)
    line = one_error_line(exported)
    assert "is damaged" in line and "resplog verify resp_" in line
    partial = tmp_path / "damaged.jsonl"
    partial.write_text(exported.stdout)
    # Whichever damaged stream the scan meets first, no stream in the file holds more events
    # than its response line counts (the extra one is never written).
    lines = [json.loads(x) for x in exported.stdout.splitlines()]
    for i, line in enumerate(lines):
        if line["kind"] == "response":
            following = itertools.takewhile(lambda x: x["kind"] == "event", lines[i + 1 :])
            assert sum(1 for _ in following) <= line["events"]
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    refused = one_error_line(resplog("import", str(partial), url=url))
    assert "cut short" in refused or "does not verify" in refused


def test_events_after_n_keeps_offsets_from_the_first_event(corpus: Corpus) -> None:
    rid = corpus.ids["streamed"]
    whole = resplog("events", rid, url=corpus.url).stdout.splitlines()
    tail = resplog("events", rid, "--after", "3", url=corpus.url).stdout.splitlines()
    assert tail == whole[4:]
