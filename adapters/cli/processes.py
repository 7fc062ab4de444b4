"""`serve --processes N`: N serving processes on one port, for a machine with more cores.

The parent binds the listening socket (adapters/cli/server.py `_listen`: a port in use is
one error line before anything starts), forks N children that each run the whole of
`serve` (their own database pool, log writer, LISTEN connection, runner, sweeper and lease
identity: the same as N replicas behind a load balancer, which the log already makes
safe), and accepts no connection
itself: the kernel hands each new connection to one child. SIGTERM or SIGINT to the parent
goes to every child, which drains as a single `serve` does; if a child exits on its own,
the parent stops the others and exits with its code, for a supervisor to restart the whole.

Per process, not shared: the per-key rate and stream limits and the key cache (as with N
replicas: a key gets N times its rate), `/metrics` (a scrape sees the process that took the
connection), and the background slots (`--workers` each). PostgreSQL only: SQLite has one
writer.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from types import FrameType


def run_children(count: int, child: Callable[[], int]) -> int:
    """Fork `count` children running `child()` (their exit status), forward SIGTERM and
    SIGINT to them, and return the first non-zero status once all have exited."""
    pids: list[int] = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # the child: never returns into the parent's code
            # Its own process group: a terminal's Ctrl-C reaches the parent alone, which
            # passes it on once (a second SIGINT would make uvicorn skip the drain).
            os.setpgid(0, 0)
            code = 1
            try:
                code = child()
            finally:
                os._exit(code)
        pids.append(pid)

    def forward(sig: int, frame: FrameType | None) -> None:
        for pid in pids:
            _signal(pid, sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status, alive = 0, set(pids)
    while alive:
        pid, raw = os.wait()
        alive.discard(pid)
        code = os.waitstatus_to_exitcode(raw)
        if code != 0 and status == 0:
            status = code if code > 0 else 128 - code
            for other in alive:  # one died: stop the rest, for a supervisor to restart
                _signal(other, signal.SIGTERM)
    return status


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
