"""`serve --processes N`: N processes behind one port (adapters/cli/processes.py). Requests
are answered by both, a cancel crosses them, SIGTERM drains and ends every one, and what it
cannot do is refused in one line."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.e2e.conftest import RESPLOG, free_port

SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "2000"}


def test_two_processes_share_the_port_and_stop_together(
    fresh_pg: Callable[[], str], tmp_path: Path
) -> None:
    url = fresh_pg()
    subprocess.run([RESPLOG, "migrate", "--database-url", url], check=True, capture_output=True)
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    parent = subprocess.Popen(
        [RESPLOG, "serve", "--database-url", url, "--port", str(port), "--processes", "2"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while (tmp_path / "serve.log").read_text().count("resplog ready") < 2:
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.1)
        with httpx.Client(base_url=base, timeout=30) as http:
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
    finally:
        if parent.poll() is None:
            parent.kill()
        log.close()


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


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
