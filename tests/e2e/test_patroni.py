"""The Patroni drill (`pytest -m ha`): `resplog serve` on the multi-host URL of three
PostgreSQL nodes under Patroni with one etcd and synchronous replication (tests/e2e/patroni.py)
rides out, under a streaming load, a `kill -9` of the leader's PostgreSQL (Patroni starts it
again), the loss of the leader's node (`kill -9` of its Patroni, then of its PostgreSQL:
Patroni promotes the synchronous standby once the leader key lapses) and a planned
`patronictl switchover`. Nothing is lost or doubled: a client that resumes its stream gets
every event once, every response completes, the log folds and `resplog verify --all` passes.
Prints the time from each fault to the first successful create."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from tests.e2e.cluster import fold_check
from tests.e2e.conftest import RESPLOG, Server, start_server, stop_server
from tests.e2e.patroni import PatroniCluster, patroni_cluster

pytestmark = pytest.mark.ha

STREAMING = {"scripted_delay_ms": "20", "scripted_tokens": "250"}  # some 5 s each
SERVE = (
    "--db-statement-timeout-s",
    "2",
    "--db-connect-timeout-s",
    "2",
    "--lease-ttl-s",
    "60",  # a node's loss must not look like the generating process's
)
BODY = {"model": "scripted", "input": "probe"}


def first_create(server: Server, since: float, limit: float = 60.0) -> float:
    with httpx.Client(base_url=server.base_url, timeout=10) as http:
        while time.monotonic() - since < limit:
            try:
                if http.post("/v1/responses", json=BODY).status_code == 200:
                    return time.monotonic() - since
            except httpx.TransportError:
                pass
            time.sleep(0.02)
    raise AssertionError(f"no create succeeded within {limit:.0f} s of the fault")


class Reader(threading.Thread):
    """A client streaming one response, resuming after `starting_after` whenever its
    stream breaks, until the response ends: the sequence numbers it got, in order."""

    def __init__(self, client: openai.OpenAI, rid: str) -> None:
        super().__init__(daemon=True)
        self.client, self.rid = client, rid
        self.numbers: list[int] = []
        self.last_type = ""

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            after = self.numbers[-1] if self.numbers else None
            try:
                kwargs = {} if after is None else {"starting_after": after}
                with self.client.responses.retrieve(self.rid, stream=True, **kwargs) as events:
                    for event in events:
                        self.numbers.append(event.sequence_number)
                        self.last_type = event.type
                if self.last_type in ("response.completed", "response.failed"):
                    return
            except (openai.APIError, httpx.HTTPError):
                pass
            time.sleep(0.2)


def drill(
    name: str,
    server: Server,
    cluster: PatroniCluster,
    fault: Callable[[], None],
    report: list[str],
) -> list[str]:
    client = openai.OpenAI(base_url=f"{server.base_url}/v1", api_key="-", max_retries=0)
    ids = [
        client.responses.create(
            model="scripted", input=name, background=True, metadata=STREAMING
        ).id
        for _ in range(3)
    ]
    readers = [Reader(client, rid) for rid in ids]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 30
    while not all(reader.numbers for reader in readers):
        assert time.monotonic() < deadline, "the streams never started"
        time.sleep(0.05)
    cluster.until_healthy()  # both standbys synchronous again after the last fault
    since = time.monotonic()
    fault()
    try:
        took = first_create(server, since)
    except AssertionError:
        print(cluster.roles(), server.log_text()[-1000:], flush=True)
        for log in sorted(cluster.root.glob("node*.log")):
            print(log.name, log.read_text(errors="replace")[-2500:], flush=True)
        raise
    report.append(f"{name}: fault -> first successful create {took:.2f} s")
    print(report[-1], flush=True)
    for reader in readers:
        reader.join(timeout=120)
        assert reader.last_type == "response.completed", (reader.rid, reader.last_type)
        assert reader.numbers == list(range(len(reader.numbers))), reader.rid
    return ids


def test_patroni_failovers_lose_and_double_nothing(tmp_path: Path) -> None:
    report: list[str] = []
    with patroni_cluster() as cluster:
        subprocess.run([RESPLOG, "migrate", "--database-url", cluster.url()], check=True)
        server = start_server(
            cluster.url(), "postgres", tmp_path / "server.log", *SERVE, migrate=False
        )
        try:
            ids = drill(
                "kill -9 of the leader's PostgreSQL",
                server,
                cluster,
                lambda: cluster.kill_postgres(cluster.leader()),
                report,
            )
            lost = cluster.leader()
            ids += drill(
                "kill -9 of the leader's Patroni and PostgreSQL",
                server,
                cluster,
                lambda: cluster.kill_node(lost),
                report,
            )
            cluster.start_patroni(lost)  # back as a replica (pg_rewind)
            cluster.until_healthy()
            ids += drill("patronictl switchover", server, cluster, lambda: _switch(cluster), report)
        finally:
            stop_server(server)
        checked = fold_check(cluster.url())
        assert all(checked.status[rid] == "completed" for rid in ids)
        verify = subprocess.run(
            [RESPLOG, "verify", "--all", "--database-url", cluster.url()],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
    print("\n".join(report))


def _switch(cluster: PatroniCluster) -> None:
    cluster.switchover()
