"""Start a fake server as a real process on a free port, and drive its test controls."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.asgi import READY

ROOT = Path(__file__).resolve().parents[2]


class FakeProcess:
    """A fake server process: `url`, its request `log()`, `reset()`, `configure()`, `kill()`."""

    def __init__(self, module: str, *args: str, start_timeout: float = 30.0) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        self.url = self._wait_ready(module, start_timeout)

    def _wait_ready(self, module: str, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(READY):
                return line[len(READY) :].strip()
            if not line and self.proc.poll() is not None:
                break
        self.stop()
        raise RuntimeError(f"fake server {module} did not start (exit {self.proc.returncode})")

    def _call(self, method: str, path: str, json: Any = None) -> Any:
        response = httpx.request(method, self.url + path, json=json, timeout=10)
        response.raise_for_status()
        return response.json()

    def log(self) -> dict[str, Any]:
        return dict(self._call("GET", "/_fake/log"))

    def reset(self) -> None:
        self._call("POST", "/_fake/reset")

    def configure(self, **settings: Any) -> dict[str, Any]:
        return dict(self._call("POST", "/_fake/config", settings))

    def wait_for(self, predicate: Any, timeout: float = 10.0) -> dict[str, Any]:
        """The log, once `predicate(log)` holds (the fake works concurrently with the test)."""
        deadline = time.monotonic() + timeout
        while True:
            log = self.log()
            if predicate(log) or time.monotonic() > deadline:
                return log
            time.sleep(0.02)

    async def until(self, predicate: Any, within: float = 10.0) -> dict[str, Any]:
        """`wait_for` for tests whose own event loop must keep running meanwhile."""
        deadline = time.monotonic() + within
        async with httpx.AsyncClient(timeout=10) as client:
            while True:
                log = dict((await client.get(self.url + "/_fake/log")).json())
                if predicate(log) or time.monotonic() > deadline:
                    return log
                await asyncio.sleep(0.02)

    def kill(self) -> None:
        """Die at once, as a crashed server does (no goodbye on open connections)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
