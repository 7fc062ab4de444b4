"""PostgreSQL going away mid-stream, end to end, on a private cluster (the shared server is
never restarted): requests meanwhile get a clear 503, streams resume, writers retry without
doubling anything, and every client saw only events that are in the log."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.cluster import fold_check, private_postgres
from tests.e2e.conftest import start_server, stop_server

STREAMS = 4
SCRIPT = {"scripted_delay_ms": "20", "scripted_tokens": "150"}


class Client(threading.Thread):
    """Streams one response and keeps every SSE frame it received, as received."""

    def __init__(self, base_url: str, background: bool) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.background = background
        self.frames: list[tuple[str, bytes]] = []
        self.progress = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {
            "model": "scripted",
            "input": "through an outage",
            "stream": True,
            "background": self.background,
            "metadata": SCRIPT,
            # The log's bytes as they are (a delivery pads its deltas: adapters/http/sse.py).
            "stream_options": {"include_obfuscation": False},
        }
        try:
            with (
                httpx.Client(base_url=self.base_url, timeout=60) as http,
                http.stream("POST", "/v1/responses", json=body) as live,
            ):
                buffer = b""
                for chunk in live.iter_raw():
                    buffer += chunk
                    *whole, buffer = buffer.split(b"\n\n")
                    self.frames += [_frame(f) for f in whole if f and not f.startswith(b":")]
                    if len(self.frames) >= 5:
                        self.progress.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self.progress.set()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(data) for kind, data in self.frames if kind != "done"]


def _frame(raw: bytes) -> tuple[str, bytes]:
    if raw == b"data: [DONE]":
        return "done", b""
    head, data = raw.split(b"\n", 1)
    return head.removeprefix(b"event: ").decode(), data.removeprefix(b"data: ")


def stored(http: httpx.Client, rid: str) -> list[bytes]:
    return http.get(f"/v1/responses/{rid}/events", params={"format": "jsonl"}).content.splitlines()


def test_postgres_stopping_mid_stream_loses_and_doubles_nothing_and_answers_503_meanwhile(
    tmp_path: Path,
) -> None:
    with private_postgres() as pg:
        url = pg.url()
        server = start_server(url, "postgres", tmp_path / "server.log", "--lease-ttl-s", "5")
        try:
            clients = [Client(server.base_url, background=i % 2 == 0) for i in range(STREAMS)]
            for client in clients:
                client.start()
            for client in clients:
                assert client.progress.wait(30)
            rid = clients[0].events()[0]["response"]["id"]

            pg.stop()
            with httpx.Client(base_url=server.base_url, timeout=60) as http:
                for _ in range(2):  # a pooled connection that died, then a refused connect
                    down = http.get(f"/v1/responses/{rid}")
                    assert down.status_code == 503
                    assert down.json()["error"]["code"] == "service_unavailable"
                    assert down.headers["retry-after"] == "1"
                refused = http.post("/v1/responses", json={"model": "scripted", "input": "x"})
                assert refused.status_code == 503
            time.sleep(1.0)  # long enough for tails, renewals and the listener to notice
            pg.start()

            for client in clients:
                client.join(90)
                assert client.error is None and not client.is_alive()
            with httpx.Client(base_url=server.base_url, timeout=60) as http:
                for client in clients:
                    events = client.events()
                    assert [e["sequence_number"] for e in events] == list(range(len(events)))
                    assert events[-1]["type"] == "response.completed"
                    log = stored(http, events[0]["response"]["id"])
                    assert [data for kind, data in client.frames if kind != "done"] == log
            assert "Traceback" not in server.log_text()
        finally:
            stop_server(server)
        checked = fold_check(url)
        assert sorted(checked.status.values()) == ["completed"] * STREAMS


def test_an_idle_server_refuses_creates_at_once_while_the_database_is_down(
    tmp_path: Path,
) -> None:
    """Nothing is riding out the outage when it starts, so no flush has noticed it: the
    create itself must not wait out the writer's 30 s retry window (the client's 10 s
    timeout would fire), nor must the next one, and creates work again once it is back."""
    with private_postgres() as pg:
        server = start_server(pg.url(), "postgres", tmp_path / "server.log")
        body = {"model": "scripted", "input": "x"}
        try:
            with httpx.Client(base_url=server.base_url, timeout=10) as http:
                assert http.post("/v1/responses", json=body).status_code == 200
                pg.stop()
                for mode in ({}, {"stream": True}, {"background": True}):
                    down = http.post("/v1/responses", json={**body, **mode})
                    assert down.status_code == 503, down.text
                    assert down.json()["error"]["code"] == "service_unavailable"
                    assert down.headers["retry-after"] == "1"
                pg.start()
                assert http.post("/v1/responses", json=body).status_code == 200
            assert "Traceback" not in server.log_text()
        finally:
            stop_server(server)
        assert sorted(fold_check(pg.url()).status.values()) == ["completed"] * 2


def test_a_frozen_database_is_a_quick_503_and_the_server_recovers_without_a_restart(
    tmp_path: Path,
) -> None:
    """SIGSTOP of every PostgreSQL process: connections neither answer nor fail. With the
    statement and connect timeouts a pooled connection's read, a create and `/ready` all
    answer within their limits (the client's 8 s timeout would fire otherwise: without
    the timeouts they hang as long as the freeze); after the thaw everything works again,
    and a background response that ran across the freeze completes."""
    with private_postgres() as pg:
        server = start_server(
            pg.url(),
            "postgres",
            tmp_path / "server.log",
            *("--db-statement-timeout-s", "2", "--db-connect-timeout-s", "2"),
        )
        body = {"model": "scripted", "input": "x"}
        try:
            with httpx.Client(base_url=server.base_url, timeout=8) as http:
                rid = http.post("/v1/responses", json=body).json()["id"]
                across = http.post(
                    "/v1/responses", json={**body, "background": True, "metadata": SCRIPT}
                ).json()["id"]
                pg.freeze()
                try:
                    for _ in range(2):
                        assert http.get(f"/v1/responses/{rid}").status_code == 503
                    assert http.post("/v1/responses", json=body).status_code == 503
                    ready = http.get("/ready")
                    assert ready.status_code == 503
                    assert ready.json()["database"] == "database not answering"
                    assert http.get("/health").status_code == 200
                finally:
                    pg.thaw()
                assert http.get(f"/v1/responses/{rid}").status_code == 200
                assert http.get("/ready").status_code == 200
                # The log writer may still be waiting out its last failed flush (up to its
                # retry delay, a second): a create in that moment is refused at once, as
                # during the outage; within a few seconds creates succeed again.
                deadline = time.monotonic() + 5
                while http.post("/v1/responses", json=body).status_code != 200:
                    assert time.monotonic() < deadline, "creates did not recover"
                    time.sleep(0.2)
                deadline = time.monotonic() + 60
                while http.get(f"/v1/responses/{across}").json()["status"] != "completed":
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            assert "Traceback" not in server.log_text()
        finally:
            stop_server(server)
        assert sorted(fold_check(pg.url()).status.values()) == ["completed"] * 3


def test_an_outage_longer_than_a_lease_ends_no_response_whose_process_is_alive(
    tmp_path: Path,
) -> None:
    """While the database is away no owner can renew, so every lease lapses at once. When it
    is back, another replica's sweeper must not end a response whose process is alive and
    about to renew it (`failed`, `worker_lost`): it leaves expired leases a whole lease
    first. The response waits on its engine (its first delta is 10 s away) through the
    outage and after it, so no flush of its own extends its lease: only its renewal keeps
    it; then its client cancels it."""
    ttl = 2.0
    quiet = {"scripted_delay_ms": "10000"}
    with private_postgres() as pg:
        owner = start_server(pg.url(), "postgres", tmp_path / "owner.log", "--lease-ttl-s", "2")
        other = start_server(pg.url(), "postgres", tmp_path / "other.log", "--lease-ttl-s", "2")
        body = {"model": "scripted", "input": "x", "background": True, "metadata": quiet}
        try:
            with httpx.Client(base_url=owner.base_url, timeout=10) as http:
                rid = http.post("/v1/responses", json=body).json()["id"]
                assert http.get(f"/v1/responses/{rid}").json()["status"] == "in_progress"
                pg.stop()
                time.sleep(1.5 * ttl)  # its lease lapses, and both sweepers meet the outage
                pg.start()
                back = time.monotonic()
                while time.monotonic() < back + 2 * ttl + 0.5:  # the sweepers' grace, and more
                    assert _status(http, rid) in ("in_progress", None), other.log_text()[-3000:]
                    time.sleep(0.1)
                assert http.post(f"/v1/responses/{rid}/cancel").json()["status"] == "cancelled"
            assert "the database is back" in other.log_text()
            for replica in (owner, other):
                assert "Traceback" not in replica.log_text()
        finally:
            stop_server(other)
            stop_server(owner)
        assert list(fold_check(pg.url()).status.values()) == ["cancelled"]


def _status(http: httpx.Client, rid: str) -> str | None:
    """The response's status, None while the server answers 503 (the database waking)."""
    got = http.get(f"/v1/responses/{rid}")
    return None if got.status_code == 503 else str(got.json()["status"])
