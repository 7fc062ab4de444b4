"""The Patroni drill (`pytest -m ha`): `resplog serve` on the multi-host URL of three
PostgreSQL nodes under Patroni with one etcd and synchronous replication (tests/e2e/patroni.py)
rides out, under a streaming load:

- a `kill -9` of the leader's PostgreSQL (Patroni starts it again);
- a `kill -9` of the leader's Patroni, restarted 2 s later as systemd's `Restart=on-failure`
  would: its PostgreSQL serves on, and it leads on (its leader key never lapsed);
- the loss of the leader's node (`kill -9` of its Patroni, then of its PostgreSQL: Patroni
  promotes a synchronous standby once the leader key lapses);
- a `kill -9` of the leader's Patroni, not restarted: its PostgreSQL serves on until
  Patroni's watchdog would reset the machine (a `kill -9` of its PostgreSQL stands in), and
  a synchronous standby is promoted once the leader key lapses;
- a planned `patronictl switchover`.

Nothing is lost or doubled: a client that resumes its stream gets every event once, every
response completes, the log folds and `resplog verify --all` passes. Prints the time from
each fault (a watchdog's: the reset) to the first successful create."""

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
from tests.e2e.patroni import WATCHDOG_FIRES, Node, PatroniCluster, patroni_cluster

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
RESTART_SEC = 2.0  # systemd's `Restart=on-failure` with `RestartSec=2`, for a Patroni killed


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
    fault: Callable[[], float | None],
    report: list[str],
) -> list[str]:
    """`fault` returns when the outage it made began, where that is not when it was
    called (a watchdog's reset, some seconds after the Patroni it watched died)."""
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
    since = fault() or since
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
            leader = cluster.leader()
            restart = threading.Timer(RESTART_SEC, cluster.start_patroni, (leader,))
            ids += drill(
                "kill -9 of the leader's Patroni, restarted as systemd would",
                server,
                cluster,
                lambda: _patroni_restarted(cluster, leader, restart),
                report,
            )
            restart.join()
            cluster.until_healthy()
            assert cluster.leader() is leader  # its key never lapsed: it still leads
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
            lost = cluster.leader()
            ids += drill(
                "kill -9 of the leader's Patroni, its machine reset by the watchdog",
                server,
                cluster,
                lambda: _fenced(cluster, lost),
                report,
            )
            assert cluster.leader() is not lost
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


def _patroni_restarted(cluster: PatroniCluster, node: Node, restart: threading.Timer) -> None:
    """`restart` starts a new Patroni `RESTART_SEC` later, while the streams go on; its
    PostgreSQL serves meanwhile, and the new Patroni finds it running and its own leader
    key not lapsed, and leads on."""
    cluster.kill_patroni(node)
    restart.start()


def _fenced(cluster: PatroniCluster, node: Node) -> float:
    """The Patroni of `node` killed and not restarted; Patroni's watchdog
    (`watchdog: {mode: required}`) would reset the machine `WATCHDOG_FIRES` s later, once
    nobody fed it: a `kill -9` of its PostgreSQL stands in for the reset (the drill has no
    /dev/watchdog). Its leader key lapses some seconds after, and a synchronous standby is
    promoted. The outage begins at the reset: until then the old leader commits as ever."""
    cluster.kill_patroni(node)
    time.sleep(WATCHDOG_FIRES)
    cluster.kill_postgres(node)
    return time.monotonic()


def _switch(cluster: PatroniCluster) -> None:
    cluster.switchover()
