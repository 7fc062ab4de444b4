"""The PostgreSQL primary dies mid-stream and its synchronous standby is promoted, on
private clusters (the shared server is never touched): `serve`, given both hosts in one
URL, finds the new primary without a restart; no event a client received is lost, none
is doubled, every response completes (leases outlive the failover), clients resume by
`starting_after`, and `resplog verify --all` passes on the new primary.

`pg_ctl promote` stands in for the failover tool (pg_auto_failover in production, see
docs/guides/high-availability.md), promoting at once: the recovery time printed is
resplog's own part of a failover, not the tool's detection delay."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.e2e.cluster import fold_check, replicated_postgres
from tests.e2e.conftest import RESPLOG, start_server, stop_server

STREAMS = 6
SCRIPT = {"scripted_delay_ms": "20", "scripted_tokens": "150"}


class Client(threading.Thread):
    """Streams one background response, keeping every SSE frame it received as received.
    A `drop` client hangs up when the primary dies (as a client whose proxy reset does);
    any client whose stream breaks resumes from the last sequence number it saw."""

    def __init__(self, base_url: str, drop: threading.Event | None, resume_url: str) -> None:
        super().__init__(daemon=True)
        self.base_url = base_url
        self.resume_url = resume_url
        self.drop = drop
        self.frames: list[tuple[str, bytes]] = []
        self.before_kill = 0  # frames received before the primary died
        self.resumes = 0
        self.progress = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        body = {
            "model": "scripted",
            "input": "through a failover",
            "stream": True,
            "background": True,
            "metadata": SCRIPT,
            # The log's bytes as they are (each delivery would pad its deltas anew).
            "stream_options": {"include_obfuscation": False},
        }
        try:
            with (
                httpx.Client(base_url=self.base_url, timeout=60) as http,
                http.stream("POST", "/v1/responses", json=body) as live,
            ):
                self._read(live)
            rid = self.events()[0]["response"]["id"]
            with httpx.Client(base_url=self.resume_url, timeout=60) as http:
                while not self.frames or self.frames[-1][0] != "done":
                    self.resumes += 1
                    self._resume(http, rid)
        except BaseException as exc:
            self.error = exc
        finally:
            self.progress.set()

    def _resume(self, http: httpx.Client, rid: str) -> None:
        after = self.events()[-1]["sequence_number"]
        params = {"stream": "true", "starting_after": str(after), "include_obfuscation": "false"}
        try:
            with http.stream("GET", f"/v1/responses/{rid}", params=params) as live:
                if live.status_code == 503:  # no primary yet: as its Retry-After says
                    time.sleep(float(live.headers["retry-after"]))
                    return
                assert live.status_code == 200, live.read()
                self._read(live)
        except httpx.TransportError:
            time.sleep(0.2)

    def _read(self, live: httpx.Response) -> None:
        buffer = b""
        try:
            for chunk in live.iter_raw():
                buffer += chunk
                *whole, buffer = buffer.split(b"\n\n")
                self.frames += [_frame(f) for f in whole if f and not f.startswith(b":")]
                if len(self.frames) >= 5:
                    self.progress.set()
                if self.drop is not None and self.drop.is_set():
                    self.drop = None
                    return  # hang up: leaving the block closes the connection
        except httpx.TransportError:
            return

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(data) for kind, data in self.frames if kind != "done"]


def _frame(raw: bytes) -> tuple[str, bytes]:
    if raw == b"data: [DONE]":
        return "done", b""
    head, data = raw.split(b"\n", 1)
    return head.removeprefix(b"event: ").decode(), data.removeprefix(b"data: ")


async def _listening(port: int) -> int:
    """How many connections LISTEN on the node at `port` now (a doorbell connection's last
    statement is its LISTEN until its first health probe, seconds later)."""
    conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    try:
        query = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'"
        return int(await conn.fetchval(query))
    finally:
        await conn.close()


def _first_create(base_url: str, killed: float) -> float:
    """Seconds from the kill to the first create that succeeds."""
    body = {"model": "scripted", "input": "x"}
    with httpx.Client(base_url=base_url, timeout=30) as http:
        while True:
            try:
                if http.post("/v1/responses", json=body).status_code == 200:
                    return time.monotonic() - killed
            except httpx.TransportError:
                pass
            time.sleep(0.02)


def test_the_primary_dying_mid_stream_loses_and_doubles_nothing_after_the_standby_is_promoted(
    tmp_path: Path,
) -> None:
    with replicated_postgres() as (primary, standby):
        url = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
            "/postgres?target_session_attrs=read-write"
        )
        server = start_server(url, "postgres", tmp_path / "server.log", "--lease-ttl-s", "5")
        # Another replica, where the clients that hung up resume (as behind a balancer).
        other = start_server(url, "postgres", tmp_path / "other.log", "--lease-ttl-s", "5")
        drop = threading.Event()
        try:
            clients = [
                Client(server.base_url, drop, other.base_url)
                if i % 2
                else Client(server.base_url, None, server.base_url)
                for i in range(STREAMS)
            ]
            for client in clients:
                client.start()
            for client in clients:
                assert client.progress.wait(30)

            killed = time.monotonic()
            primary.kill()
            for client in clients:
                client.before_kill = len(client.frames)
            drop.set()
            standby.promote()
            promoted = time.monotonic() - killed
            recovered = _first_create(server.base_url, killed)
            # Both replicas' doorbell connections found the new primary by themselves.
            deadline = time.monotonic() + 15
            while asyncio.run(_listening(standby.port)) < 2:
                assert time.monotonic() < deadline, "a LISTEN connection did not come back"
                time.sleep(0.05)

            for client in clients:
                client.join(60)
                assert client.error is None and not client.is_alive()
            with httpx.Client(base_url=server.base_url, timeout=60) as http:
                for client in clients:
                    events = client.events()
                    assert [e["sequence_number"] for e in events] == list(range(len(events)))
                    # Completed, not failed: its lease outlived the failover (a lease lost
                    # would have been swept, `failed` with reason `worker_lost`).
                    assert events[-1]["type"] == "response.completed", (
                        f"{events[-1]}\n--- server.log\n{server.log_text()[-4000:]}"
                        f"\n--- other.log\n{other.log_text()[-4000:]}"
                    )
                    rid = events[0]["response"]["id"]
                    log = http.get(
                        f"/v1/responses/{rid}/events", params={"format": "jsonl"}
                    ).content.splitlines()
                    received = [data for kind, data in client.frames if kind != "done"]
                    # What a client saw before the kill was committed on both nodes ...
                    assert log[: client.before_kill] == received[: client.before_kill]
                    # ... and all it saw, across its resumes, is the log: none missing or twice.
                    assert received == log
            print(
                f"\nfailover: promoted {promoted:.2f} s after the kill; first create "
                f"{recovered:.2f} s after it; "
                f"{sum(c.resumes for c in clients)} resumes by {STREAMS} clients; "
                f"{sum(len(c.frames) for c in clients)} frames"
            )
            for replica in (server, other):
                assert "Traceback" not in replica.log_text()
        finally:
            stop_server(other)
            stop_server(server)
        checked = fold_check(url)
        assert set(checked.status.values()) == {"completed"}
        verify = subprocess.run(
            [RESPLOG, "verify", "--all", "--database-url", url], capture_output=True, text=True
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
