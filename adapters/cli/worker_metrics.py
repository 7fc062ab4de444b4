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
    from adapters.wiring import Process


@contextlib.asynccontextmanager
async def metrics_port(
    settings: Settings, process: Process, sock: socket.socket | None
) -> AsyncIterator[None]:
    """Serve the metrics on `sock` (bound already) while the block runs; nothing if None."""
    if sock is None:
        yield
        return
    import uvicorn

    from adapters.metrics import Metrics

    metrics = Metrics()
    process.observe_log(metrics)
    process.observe_work(metrics)
    metrics.watch(process.leases_held, process.live_tails)

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
