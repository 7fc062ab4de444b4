"""What runs beside the use-cases in every `serve` and `worker` process: the lease keeper
(renewal, cancel delivery), the claim loop (if the process has background slots) and the
sweeper, started together and stopped in order on shutdown.

Shutdown (SIGTERM): stop claiming at once; let running generations finish within the grace
period; end the rest with `failed` (`server_shutdown`), which releases their leases in the
same commit; keep renewing leases until then, so nobody sweeps a generation still running.
"""

from __future__ import annotations

import asyncio
import logging

from service.bundle import Bundle
from service.work.sweeper import Sweeper
from service.work.worker import Worker

log = logging.getLogger("resplog.background")


class Background:
    """The background machinery of one process."""

    def __init__(self, svc: Bundle, *, lease_ttl: float, claim_poll_s: float = 1.0) -> None:
        self.svc = svc
        self.worker = Worker(svc, poll_s=claim_poll_s)
        self.sweeper = Sweeper(svc, every=lease_ttl / 2, outage_grace_s=lease_ttl)
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> None:
        keeper = self.svc.keeper
        keeper.on_free = self.worker.wake
        self.svc.bells.listen(self.worker.wake, keeper.on_cancel)
        keeper.start()
        if keeper.slots > 0:
            self.worker.start()
        self.sweeper.start()

    def begin_drain(self, grace_s: float) -> asyncio.Task[None]:
        """Start shutting down (idempotent): the task that finishes it."""
        if self._drain is None:
            log.info("shutting down: no new work; %.1fs for running generations", grace_s)
            self.svc.keeper.close()
            self._drain = asyncio.create_task(self._shutdown(grace_s), name="resplog-drain")
        return self._drain

    async def drain(self, grace_s: float) -> None:
        await asyncio.shield(self.begin_drain(grace_s))

    async def _shutdown(self, grace_s: float) -> None:
        await self.worker.stop()
        await self.sweeper.stop()
        try:
            await self.svc.runner.shutdown(grace_s)
        finally:
            await self.svc.keeper.stop()
