"""`resplog worker --metrics-port`: the worker's own `GET /metrics` (its claims, lost
leases, sweeps, engine errors and log flushes), the same page and access rule as `serve`'s,
on a small uvicorn server that shares the worker's loop and answers nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from adapters.cli.common import log
from service.settings import Settings

if TYPE_CHECKING:
    from adapters.metrics import Metrics


def worker_metrics(sock: socket.socket | None) -> Metrics | None:
    """The worker's metrics when it has a metrics port (prometheus-client imported only
    then)."""
    if sock is None:
        return None
    from adapters.metrics import Metrics

    return Metrics()


@contextlib.asynccontextmanager
async def metrics_port(
    settings: Settings, metrics: Metrics | None, sock: socket.socket | None
) -> AsyncIterator[None]:
    """Serve `metrics` on `sock` (bound already) while the block runs; nothing if None."""
    if metrics is None or sock is None:
        yield
        return
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # SIGTERM and SIGINT are the worker's: it drains, then stops this

    app = metrics.scrape_only(settings.metrics, settings.metrics_key)
    config = uvicorn.Config(app, log_level="warning", log_config=None, lifespan="off", ws="none")
    server = Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    host, port = sock.getsockname()[:2]
    log.info("resplog worker: metrics on http://%s:%d/metrics (%s)", host, port, settings.metrics)
    try:
        yield
    finally:
        server.should_exit = True
        await task
