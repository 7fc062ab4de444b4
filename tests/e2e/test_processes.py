"""`serve --processes N`: N processes behind one port (adapters/cli/processes.py). Requests
are answered by both, a cancel crosses them, SIGTERM drains and ends every one, and what it
cannot do is refused in one line."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import RESPLOG, free_port

SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "2000"}


def test_two_processes_share_the_port_and_stop_together(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    with _two_processes(fresh_pg(), tmp_path) as (parent, port):
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            ids = [
                http.post("/v1/responses", json={"model": "scripted", "input": "hi"}).json()["id"]
                for _ in range(8)
            ]
            # Every id is readable whichever process takes the request.
            assert all(http.get(f"/v1/responses/{i}").status_code == 200 for i in ids)
            running = http.post(
                "/v1/responses",
                json={"model": "scripted", "input": "x", "background": True, "metadata": SLOW},
            ).json()["id"]
            cancelled = http.post(f"/v1/responses/{running}/cancel").json()
            assert cancelled["status"] == "cancelled"
        children = _children(parent.pid)
        assert len(children) == 2
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) in (0, 128 + signal.SIGTERM)
        assert not any(_alive(pid) for pid in children)
        assert (tmp_path / "serve.log").read_text().count("shutting down") == 2


def test_the_metrics_of_two_processes_are_one_page(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    """Whichever process takes a scrape, it counts every process's requests: totals are the
    sum of both (each wrote its files in the parent's private directory), never go down
    from one scrape to the next, and the directory is gone at shutdown."""
    # TMPDIR: where the parent makes its directory.
    with _two_processes(fresh_pg(), tmp_path, TMPDIR=str(tmp_path)) as (parent, port):
        (shared,) = tmp_path.glob("resplog-metrics-*")
        children = _children(parent.pid)
        # A new connection per request: the kernel hands each to either process.
        fresh = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=fresh) as http:
            sent, pages = 0, [_scrape(http)]
            while sent < 200 and not all(_served(shared, pid, tmp_path) for pid in children):
                for _ in range(5):
                    body = {"model": "scripted", "input": "hi"}
                    assert http.post("/v1/responses", json=body).status_code == 200
                    sent += 1
                pages += [_scrape(http) for _ in range(3)]
            served = [_served(shared, pid, tmp_path) for pid in children]
            assert all(served), "one process took every connection"
            assert sum(served) == sent
            pages += [_scrape(http) for _ in range(4)]
        for before, after in itertools.pairwise(pages):
            for sample, count in before.items():
                if sample[0].endswith(("_total", "_count", "_sum", "_bucket")):
                    assert after.get(sample, 0.0) >= count, sample
        for page in pages[-5:]:  # whichever process answered
            assert page[("resplog_http_requests_total", _ROUTE)] == sent
            assert page[("resplog_responses_ended_total", _DONE)] == sent
            assert page[("resplog_http_requests_in_flight", ())] == 0
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=30) in (0, 128 + signal.SIGTERM)
        assert not shared.exists()


def test_leases_held_in_either_process_are_summed(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    """A gauge of the processes' live state (`livesum`): a generation running in one of
    them is seen by a scrape that the other answers too, and is gone when it ends."""
    held = ("resplog_leases_held", ())
    fresh = httpx.Limits(max_keepalive_connections=0)
    with (
        _two_processes(fresh_pg(), tmp_path) as (parent, port),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, limits=fresh) as http,
    ):
        body = {"model": "scripted", "input": "x", "background": True, "metadata": SLOW}
        running = http.post("/v1/responses", json=body).json()["id"]
        _wait(lambda: all(_scrape(http)[held] == 1 for _ in range(6)), parent)
        http.post(f"/v1/responses/{running}/cancel")
        _wait(lambda: all(_scrape(http)[held] == 0 for _ in range(6)), parent)


def test_what_processes_cannot_do_is_one_line(tmp_path: Path) -> None:
    sqlite = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    subprocess.run([RESPLOG, "migrate", "--database-url", sqlite], check=True, capture_output=True)
    got = subprocess.run(
        [RESPLOG, "serve", "--database-url", sqlite, "--processes", "2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert got.returncode == 1
    assert "--processes above 1 needs PostgreSQL" in got.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        got = subprocess.run(
            [
                RESPLOG,
                "serve",
                "--database-url",
                "postgresql+asyncpg://postgres@127.0.0.1/test",
                "--port",
                str(port),
                "--processes",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert got.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in got.stderr
    assert "Traceback" not in got.stderr


_ROUTE = (("method", "POST"), ("route", "/v1/responses"), ("status", "200"))
_DONE = (("reason", "completed"), ("status", "completed"))


def _scrape(http: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = http.get("/metrics")
    assert r.status_code == 200, r.text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def _served(shared: Path, pid: int, tmp: Path) -> float:
    """The creates that process `pid` answered: its counters' file alone (prometheus-client
    names it `counter_<pid>.db`), read by the same collector a scrape uses."""
    alone = tmp / f"alone-{pid}"
    alone.mkdir(exist_ok=True)
    shutil.copy(shared / f"counter_{pid}.db", alone)
    registry = CollectorRegistry()
    MultiProcessCollector(registry, str(alone))  # type: ignore[no-untyped-call]
    return registry.get_sample_value("resplog_http_requests_total", dict(_ROUTE)) or 0.0


@contextlib.contextmanager
def _two_processes(
    url: str, tmp_path: Path, **env: str
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`serve --processes 2` on a migrated `url` (its log in `serve.log`), once both
    processes are ready: the parent and the port. Stopped (SIGTERM, else killed) at the
    end if the test left it running."""
    subprocess.run([RESPLOG, "migrate", "--database-url", url], check=True, capture_output=True)
    port = free_port()
    with (tmp_path / "serve.log").open("wb") as log:
        parent = subprocess.Popen(
            [RESPLOG, "serve", "--database-url", url, "--port", str(port), "--processes", "2"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
        try:
            _wait(lambda: (tmp_path / "serve.log").read_text().count("resplog ready") == 2, parent)
            yield parent, port
        finally:
            if parent.poll() is None:
                parent.send_signal(signal.SIGTERM)
                try:
                    parent.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    parent.kill()
                    parent.wait()


def _wait(done: Callable[[], bool], parent: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline and parent.poll() is None, "timed out"
        time.sleep(0.1)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
