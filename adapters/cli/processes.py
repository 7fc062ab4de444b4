"""`serve --processes N`: N serving processes on one port, for a machine with more cores.

The parent binds the listening socket (adapters/cli/server.py `listen`: a port in use is
one error line before anything starts), forks N children that each run the whole of
`serve` (their own database pool, log writer, LISTEN connection, runner, sweeper and lease
identity: the same as N replicas behind a load balancer, which the log already makes
safe), and accepts no connection
itself: the kernel hands each new connection to one child. SIGTERM or SIGINT to the parent
goes to every child, which drains as a single `serve` does; if a child exits on its own,
the parent stops the others and exits with its code, for a supervisor to restart the whole.

Per process, not shared: the per-key rate and stream limits and the key cache (as with N
replicas: a key gets N times its rate) and the background slots (`--workers` each).
PostgreSQL only: SQLite has one writer.

Shared: `/metrics`. Whichever process takes a scrape, it answers for all of them
(prometheus-client's multiprocess mode, adapters/metrics/prom.py): the parent makes a
private directory for the children's metric files (`shared_metrics`) and names it in
`PROMETHEUS_MULTIPROC_DIR` before it forks (nothing in the parent imports prometheus-client,
whose import reads the variable); a child that exits is marked dead there (its gauges leave
the sums, its counts stay), and the directory is removed when the last child is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator
from types import FrameType

_SHARED = "PROMETHEUS_MULTIPROC_DIR"


@contextlib.contextmanager
def shared_metrics() -> Iterator[str]:
    """A directory of its own for the children's metric files, in their environment while
    it lasts (they inherit it at the fork)."""
    # prometheus-client chooses where values live once, at its import: imported here
    # already, the children would each count in their own memory again.
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus-client was imported before the fork")
    path = tempfile.mkdtemp(prefix="resplog-metrics-")
    before = os.environ.get(_SHARED)
    os.environ[_SHARED] = path
    try:
        yield path
    finally:
        if before is None:
            del os.environ[_SHARED]
        else:
            os.environ[_SHARED] = before
        shutil.rmtree(path, ignore_errors=True)


def run_children(
    count: int, child: Callable[[], int], exited: Callable[[int], None] = lambda pid: None
) -> int:
    """Fork `count` children running `child()` (their exit status), forward SIGTERM and
    SIGINT to them, tell `exited` of each one gone, and return the first non-zero status
    once all have exited."""
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
        exited(pid)
        code = os.waitstatus_to_exitcode(raw)
        if code != 0 and status == 0:
            status = code if code > 0 else 128 - code
            for other in alive:  # one died: stop the rest, for a supervisor to restart
                _signal(other, signal.SIGTERM)
    return status


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
