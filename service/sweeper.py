"""Crash recovery: ends the responses whose process is gone, so none stays `in_progress`
forever (invariant 7 of docs/invariants.md).

A response in progress whose lease expired lost its process (killed, or cut off from the
database for longer than a lease). The sweeper takes the lease over first, which fences the
old owner out should it still be alive, and then appends the terminal event: `failed` with
reason `worker_lost`, or `cancelled` if someone asked for that meanwhile. Of two sweepers
only one wins the lease, so only one writes. A queued response whose claim expired needs no
sweeping: it is claimable again, and the next worker to claim it generates it.
"""

from __future__ import annotations

import logging
import random

from domain.commands import cancel, fail
from domain.errors import DomainError
from domain.reasons import FailReason
from service.bundle import Bundle
from service.periodic import Periodic
from service.reads import load_state

log = logging.getLogger("resplog.sweeper")

LOST_MESSAGE = "The process generating this response stopped before it finished."


class Sweeper:
    """Finds expired leases and ends their responses; runs every `every` seconds."""

    def __init__(self, svc: Bundle, *, every: float, batch: int = 100) -> None:
        self._svc = svc
        self.every = every
        self.batch = batch
        # At once on start-up, then every period, jittered so that replicas spread out.
        self._loop = Periodic(
            "sweep", self.sweep_once, lambda: self.every * random.uniform(0.75, 1.25), at_once=True
        )
        self.ended = 0  # responses ended so far (tests, benchmarks)

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def sweep_once(self) -> int:
        """End every response found with an expired lease; how many this pass ended."""
        ended = 0
        for rid in await self._svc.leases.expired(self.batch):
            if self._svc.runner.get(rid) is not None:
                continue  # ours and alive: the renewal is late (the database was away)
            if await self._end(rid):
                ended += 1
        self.ended += ended
        return ended

    async def _end(self, rid: str) -> bool:
        svc = self._svc
        claim = await svc.leases.acquire(rid)
        if claim is None:
            return False  # another sweeper (or its owner) was first
        state = await load_state(svc, rid)
        if state.terminal:
            return False
        if claim.cancel is not None:
            decision = cancel(state, reason=claim.cancel)
        else:
            decision = fail(
                state,
                code="server_error",
                message=LOST_MESSAGE,
                reason=FailReason.WORKER_LOST,
                detail="its lease expired: the process that held it stopped renewing it",
            )
        try:
            await svc.writer.append(rid, state.version, decision.events)
        except DomainError as exc:
            log.warning("could not end %s (%s)", rid, exc)
            return False
        log.warning(
            "ended %s: its process is gone (%s)", rid, claim.cancel or FailReason.WORKER_LOST
        )
        return True
