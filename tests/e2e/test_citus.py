"""resplog on Citus, end to end: a coordinator and two workers (private clusters on
loopback), `resplog migrate --citus`, `resplog serve` replicas on the coordinator, the
official SDK. Marked `citus` (`pytest -m citus`, a step of `.ci/run` of its own); skipped,
saying why, where the extension is not installed (tests/e2e/citus_cluster.py)."""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from adapters.store.citus import DISTRIBUTED, REFERENCE
from tests.e2e.citus_cluster import CitusCluster, citus_cluster, why_not
from tests.e2e.cluster import fold_check
from tests.e2e.conftest import LOOPBACK_MCP, RESPLOG, Server, start_server, stop_server
from tests.e2e.test_mcp import SECRET, ToolServer, _start_tools, _tool
from tests.e2e.test_scaleout import TTL, ended, generating, sdk, wait_for
from tests.e2e.webhooks_kit import KEY, Receiver, add_endpoint, deliveries

pytestmark = pytest.mark.citus

_names = itertools.count()
# Some 4 s of generation each: long enough to be mid-stream when a node goes.
STEADY = {"scripted_delay_ms": "20", "scripted_tokens": "200"}
# Webhooks to a receiver on loopback; the deliverers look for due deliveries (a read across
# shards) twice a second.
WEBHOOKS = (
    *("--reasoning-key", KEY, "--webhook-hosts", "127.0.0.1/32"),
    *("--webhook-backoff-s", "0.1", "--webhook-poll-s", "0.5"),
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[CitusCluster]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    with citus_cluster(2) as made:
        yield made


@dataclass
class Deployment:
    """One distributed database and two `serve` replicas on its coordinator, shared by the
    tests below in their order (the last kills a replica)."""

    cluster: CitusCluster
    name: str
    url: str
    a: Server
    b: Server


@pytest.fixture(scope="module")
def deployment(
    cluster: CitusCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("citus")
    name, url = distributed(cluster)
    a = start_server(url, "postgres", tmp / "a.log", *TTL, *LOOPBACK_MCP, *WEBHOOKS)
    b = start_server(url, "postgres", tmp / "b.log", *TTL, *LOOPBACK_MCP, *WEBHOOKS)
    yield Deployment(cluster, name, url, a, b)
    for server in (a, b):
        if server.process.poll() is None:
            stop_server(server)
        else:
            server.log_file.close()


@pytest.fixture
def clients(deployment: Deployment) -> Iterator[tuple[openai.OpenAI, openai.OpenAI]]:
    """The SDK on each replica, closed after the test (a killed replica's sockets too)."""
    a, b = sdk(deployment.a), sdk(deployment.b)
    yield a, b
    a.close()
    b.close()


def resplog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RESPLOG, *args], capture_output=True, text=True, timeout=120)


def new_database(cluster: CitusCluster) -> tuple[str, str]:
    name = f"rl_{os.getpid()}_{next(_names)}"
    return name, cluster.new_database(name)


def distributed(cluster: CitusCluster) -> tuple[str, str]:
    """A new database, migrated and distributed: its name and URL."""
    name, url = new_database(cluster)
    done = resplog("migrate", "--citus", "--database-url", url)
    assert done.returncode == 0, done.stderr
    assert "distributed on Citus: responses, events" in done.stdout
    return name, url


def verify_all(url: str, *more: str) -> str:
    done = resplog("verify", "--all", *more, "--database-url", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " 0 violations" in done.stdout, done.stdout
    return done.stdout


def cluster_psql(deployment: Deployment, sql: str) -> str:
    return deployment.cluster.psql(deployment.cluster.coordinator, sql, deployment.name)


def node_of(cluster: CitusCluster, database: str, response_id: str) -> int:
    """The port of the worker that holds `response_id`'s shard."""
    return int(
        cluster.psql(
            cluster.coordinator,
            "SELECT nodeport FROM pg_dist_placement p JOIN pg_dist_node n USING (groupid) "
            f"WHERE shardid = get_shard_id_for_distribution_column('responses', '{response_id}')",
            database,
        )
    )


def test_migrate_citus_refuses_a_server_without_the_extension_or_workers(
    cluster: CitusCluster,
) -> None:
    """A clear error, and not a table made: neither the migrations nor any distribution."""
    for extension, why in ((False, "no Citus extension"), (True, "has no worker")):
        name = f"rl_bare_{os.getpid()}_{next(_names)}"
        cluster.psql(cluster.coordinator, f"CREATE DATABASE {name}")
        if extension:  # on the coordinator alone: no worker added
            cluster.psql(cluster.coordinator, "CREATE EXTENSION citus", name)
        done = resplog("migrate", "--citus", "--database-url", cluster.coordinator.url(name))
        assert done.returncode == 1
        assert why in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        tables = cluster.psql(
            cluster.coordinator, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'", name
        )
        assert tables == "0"


def test_serve_refuses_a_half_distributed_log(cluster: CitusCluster, tmp_path: Path) -> None:
    name, url = new_database(cluster)
    assert resplog("migrate", "--database-url", url).returncode == 0
    cluster.psql(cluster.coordinator, "SELECT create_distributed_table('responses', 'id')", name)
    with pytest.raises(RuntimeError, match="half distributed on Citus"):
        start_server(url, "postgres", tmp_path / "serve.log")
    # What the message says to do finishes it.
    assert resplog("migrate", "--citus", "--database-url", url).returncode == 0
    assert cluster.psql(cluster.coordinator, "SELECT count(*) FROM pg_dist_partition", name) == str(
        len(DISTRIBUTED) + len(REFERENCE) + 2
    )  # and `events`' two partitions


def test_the_sdk_flows_on_two_replicas(
    deployment: Deployment, clients: tuple[openai.OpenAI, openai.OpenAI]
) -> None:
    """Create, stream, background, a stream resumed on the other replica, a cancel across
    replicas, a conversation continued on both; the log then verifies."""
    a, b = clients
    plain = a.responses.create(model="scripted", input="plain")
    assert plain.status == "completed" and plain.output_text == "You said: plain"
    assert b.responses.retrieve(plain.id).output_text == "You said: plain"
    # A chain of turns across replicas (and shards), read one turn at a time.
    second = b.responses.create(model="scripted", input="again", previous_response_id=plain.id)
    third = a.responses.create(model="scripted", input="more", previous_response_id=second.id)
    assert third.status == "completed"
    assert b.responses.input_items.list(third.id).data[0].type == "message"
    events = list(b.responses.create(model="scripted", input="streamed", stream=True))
    assert events[-1].type == "response.completed"

    stream = a.responses.create(
        model="scripted",
        input="resume me",
        background=True,
        stream=True,
        metadata={"scripted_delay_ms": "5", "scripted_tokens": "80"},
    )
    first = []
    for event in stream:
        first.append(event)
        if len(first) == 10:
            break
    stream.close()
    rid = first[0].response.id  # type: ignore[union-attr]
    after = first[-1].sequence_number
    rest = list(b.responses.retrieve(rid, stream=True, starting_after=after))
    seqs = [e.sequence_number for e in first + rest]
    assert seqs == list(range(len(seqs)))
    assert rest[-1].type == "response.completed"

    slow = {"scripted_delay_ms": "20", "scripted_tokens": "2000"}
    r = a.responses.create(model="scripted", input="cancel", background=True, metadata=slow)
    assert generating(wait_for(b, r.id, generating))
    assert b.responses.cancel(r.id).status == "cancelled"

    conversation = a.conversations.create()
    one = a.responses.create(model="scripted", input="one", conversation=conversation.id)
    two = b.responses.create(model="scripted", input="two", conversation=conversation.id)
    assert (one.status, two.status) == ("completed", "completed")
    items = list(b.conversations.items.list(conversation.id, order="asc"))
    assert [i.type for i in items if i.type == "message"] == ["message"] * 4

    checked = fold_check(deployment.url)
    assert checked.status[rid] == "completed"
    assert checked.status[r.id] == "cancelled"
    verify_all(deployment.url)


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[ToolServer]:
    """A real MCP server (tests/fakes/mcp_server.py), as tests/e2e/test_mcp.py starts it."""
    ts = _start_tools(tmp_path, "--auth", f"Bearer {SECRET}")
    yield ts
    ts.process.kill()
    ts.process.wait()


def test_the_mcp_loop_on_two_replicas(
    deployment: Deployment, clients: tuple[openai.OpenAI, openai.OpenAI], tools: ToolServer
) -> None:
    """The tool loop streamed, run in the background and read on the other replica, in a
    conversation, and an approval asked on one replica and given on the other: each tool
    runs once, and the log verifies."""
    a, b = clients
    events = list(
        a.responses.create(
            model="scripted",
            input="loop three times",
            tools=[_tool(tools)],  # type: ignore[list-item]
            metadata={"scripted_calls": "echo,shout,echo"},
            stream=True,
        )
    )
    final = events[-1].response  # type: ignore[union-attr]
    assert final.status == "completed"
    calls = [i for i in final.output if i.type == "mcp_call"]
    assert [c.name for c in calls] == ["echo", "shout", "echo"]
    assert {c.status for c in calls} == {"completed"}
    assert [e.type for e in events].count("response.mcp_call.completed") == 3

    queued = a.responses.create(
        model="scripted",
        input="a loop in the background",
        background=True,
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "shout,echo"},
    )
    done = wait_for(b, queued.id, ended, timeout=60)
    assert done.status == "completed", done.error
    assert [i.name for i in done.output if i.type == "mcp_call"] == ["shout", "echo"]

    conversation = b.conversations.create()
    turn = b.responses.create(
        model="scripted",
        input="a loop in a conversation",
        conversation=conversation.id,
        tools=[_tool(tools)],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert turn.status == "completed"
    kept = [i.type for i in a.conversations.items.list(conversation.id, order="asc")]
    assert "mcp_call" in kept and "mcp_list_tools" in kept

    ask = _tool(tools, require_approval={"never": {"tool_names": ["shout"]}})
    first = a.responses.create(
        model="scripted",
        input="ask first",
        tools=[ask],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    request = first.output[-1]
    assert request.type == "mcp_approval_request" and request.name == "echo"  # type: ignore[union-attr]
    second = b.responses.create(
        model="scripted",
        previous_response_id=first.id,
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],  # type: ignore[list-item]
        tools=[ask],  # type: ignore[list-item]
        metadata={"scripted_calls": "echo"},
    )
    assert second.status == "completed", second.error
    call = next(i for i in second.output if i.type == "mcp_call")
    assert call.approval_request_id == request.id and call.status == "completed"  # type: ignore[union-attr]
    # Each call ran once: the streamed loop's three, the background's two, the
    # conversation's one and the approved one.
    assert tools.calls() == ["echo", "shout", "echo", "shout", "echo", "echo", "echo"]
    verify_all(deployment.url)


def test_webhooks_prompts_and_an_erasure(
    deployment: Deployment, clients: tuple[openai.OpenAI, openai.OpenAI]
) -> None:
    """The tables beside the log, as `migrate --citus` distributes them: an endpoint (a
    reference table) hears background responses on every shard, each delivered once by
    one of the two replicas' deliverers (deliveries by response); a prompt template (a
    stream of its own) is used by a create; an erasure; the log then verifies."""
    a, b = clients
    receiver = Receiver().start()
    try:
        endpoint_id, secret = add_endpoint(deployment.url, receiver.url)
        ids = {
            client.responses.create(model="scripted", input=f"hook {i}", background=True).id
            for i, client in zip(range(6), itertools.cycle((a, b)), strict=False)
        }
        got = receiver.wait(6, timeout=30)
        events = [a.webhooks.unwrap(r.body, r.headers, secret=secret) for r in got]
        assert {e.data.id for e in events} == ids  # type: ignore[union-attr]
        assert {e.type for e in events} == {"response.completed"}
        time.sleep(1.0)  # two deliverers, one delivery each
        assert len(receiver.got) == 6
        records = deliveries(deployment.url, endpoint_id)  # read across shards, attempts too
        assert {r["delivery"]["response_id"] for r in records} == ids
        assert {r["delivery"]["status"] for r in records} == {"delivered"}
        assert [[a["outcome"] for a in r["attempts"]] for r in records] == [["delivered"]] * 6
    finally:
        receiver.stop()

    added = resplog(
        "prompts", "add", "--instructions", "You are {{persona}}.", "--database-url", deployment.url
    )
    assert added.returncode == 0, added.stderr
    pid = added.stdout.split()[0]
    used = b.responses.create(
        model="scripted", prompt={"id": pid, "variables": {"persona": "terse"}}, input="go"
    )
    assert used.status == "completed" and used.instructions == "You are terse."
    listed = resplog("prompts", "list", "--database-url", deployment.url)
    assert pid in listed.stdout, listed.stdout + listed.stderr

    conversation = a.conversations.create(
        items=[{"type": "message", "role": "user", "content": "forget me"}]
    )
    erase = ("erase", "--conversation", conversation.id, "--reason", "asked to")
    erased = resplog(*erase, "--database-url", deployment.url)
    assert erased.returncode == 0, erased.stderr
    recorded = cluster_psql(deployment, "SELECT count(*) FROM erasures")
    assert recorded == "1"
    verify_all(deployment.url)


def _creates_while_down(http: httpx.Client) -> tuple[list[str], int]:
    """Creates until one was served and one refused (the stopped worker's shards and the
    other's, at random): the ids served, and how many were refused. Each is answered within
    a few seconds either way, never after the writer's whole retry window."""
    served: list[str] = []
    refused = 0
    for i in range(40):
        began = time.monotonic()
        answer = http.post("/v1/responses", json={"model": "scripted", "input": f"down {i}"})
        took = time.monotonic() - began
        assert took < 5, (answer.status_code, took)
        if answer.status_code == 503:
            assert answer.headers["retry-after"] == "1"
            assert answer.json()["error"]["code"] == "service_unavailable"
            refused += 1
        else:
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
            served.append(answer.json()["id"])
        if served and refused:
            break
    return served, refused


def test_a_worker_stopped_mid_stream(
    deployment: Deployment, clients: tuple[openai.OpenAI, openai.OpenAI]
) -> None:
    """Its shards' requests are answered 503 with Retry-After; the other worker's streams
    go on at their pace meanwhile (no flush waits for the stopped worker) and creates whose
    stream lands there are served; once it is back every response ends and nothing is
    lost."""
    cluster, client = deployment.cluster, clients[0]
    victim = cluster.workers[0]
    ids = [
        client.responses.create(
            model="scripted", input=f"outage {i}", background=True, metadata=STEADY
        ).id
        for i in range(8)
    ]
    on_victim = [rid for rid in ids if node_of(cluster, deployment.name, rid) == victim.port]
    elsewhere = [rid for rid in ids if rid not in on_victim]
    assert on_victim and elsewhere  # 8 random ids on 2 workers
    assert generating(wait_for(client, ids[-1], generating))
    victim.stop()
    try:
        with httpx.Client(base_url=deployment.a.base_url, timeout=30) as http:
            down = http.get(f"/v1/responses/{on_victim[0]}")
            assert down.status_code == 503, down.text
            assert down.headers["retry-after"] == "1"
            assert down.json()["error"]["code"] == "service_unavailable"
            up = http.get(f"/v1/responses/{elsewhere[0]}")
            assert up.status_code == 200, up.text
            served, refused = _creates_while_down(http)
            assert served and refused, (served, refused)
            # The live worker's streams (some 4 s of generation each) end while the other
            # is still away: well within the writer's 30 s retry window, which their
            # flushes would otherwise wait out beside the stopped worker's streams.
            for rid in elsewhere:
                assert wait_for(client, rid, ended, timeout=15).status == "completed"
            assert http.get(f"/v1/responses/{on_victim[0]}").status_code == 503  # still away
    finally:
        victim.start()
    finals = [wait_for(client, rid, ended, timeout=90) for rid in ids]
    assert all(ended(r) for r in finals), [r.status for r in finals]
    assert all(r.status == "completed" for r in finals if r.id in elsewhere)
    verify_all(deployment.url)


@pytest.mark.parametrize("mode", ["block_writes", "force_logical"])
def test_a_worker_added_and_a_rebalance_while_streams_run(
    deployment: Deployment, clients: tuple[openai.OpenAI, openai.OpenAI], mode: str
) -> None:
    """A third worker, its shards moved while writes to them wait (`block_writes`); then a
    fourth, its shards copied by logical replication while writes go on (`force_logical`,
    what the default transfer mode picks for tables with a primary key): every stream's
    sequence complete, nothing lost, the log verifies."""
    cluster, name, client = deployment.cluster, deployment.name, clients[1]

    def streamed(i: int) -> list[int]:
        events = client.responses.create(
            model="scripted", input=f"move {i}", stream=True, metadata=STEADY
        )
        return [e.sequence_number for e in events if e.type != "response.completed"] + [-1]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        running = [pool.submit(streamed, i) for i in range(6)]
        time.sleep(1.0)
        added = cluster.add_worker(name)
        cluster.psql(
            cluster.coordinator,
            f"SELECT citus_rebalance_start(shard_transfer_mode => '{mode}')",
            name,
        )
        status = ""
        deadline = time.monotonic() + 90
        while not status.startswith("finished") and time.monotonic() < deadline:
            time.sleep(0.5)
            status = cluster.psql(
                cluster.coordinator, "SELECT state, details FROM citus_rebalance_status()", name
            )
        assert status.startswith("finished"), status
        results = [f.result(timeout=120) for f in running]
    for seqs in results:
        assert seqs[-1] == -1 and seqs[:-1] == list(range(len(seqs) - 1))
    moved = cluster.psql(
        cluster.coordinator,
        f"SELECT count(*) FROM citus_shards WHERE nodeport = {added.port}",
        name,
    )
    assert int(moved) > 0
    after = client.responses.create(model="scripted", input=f"after the move ({mode})")
    assert after.status == "completed"
    verify_all(deployment.url)


def test_kill_9_of_a_replica_mid_generation_leaves_a_log_that_verifies(
    deployment: Deployment, clients: tuple[openai.OpenAI, openai.OpenAI]
) -> None:
    a, b = clients
    ids = [
        client.responses.create(
            model="scripted", input=f"chaos {i}", background=True, metadata=STEADY
        ).id
        for i, client in zip(range(8), itertools.cycle((a, b)), strict=False)
    ]
    assert generating(wait_for(b, ids[0], generating))
    deployment.a.process.kill()  # SIGKILL: its leases lapse, b's sweeper ends its responses
    deployment.a.process.wait()
    finals = [wait_for(b, rid, ended, timeout=60) for rid in ids]
    assert all(ended(r) for r in finals), [r.status for r in finals]
    assert {r.status for r in finals} <= {"completed", "failed"}
    verify_all(deployment.url)
    assert set(fold_check(deployment.url).status.values()) <= {"completed", "failed", "cancelled"}
