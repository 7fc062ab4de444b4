"""Crash recovery: ends the responses whose process is gone, so none stays `in_progress`
forever (invariant 7 of docs/invariants.md).

A response in progress whose lease expired lost its process (killed, or cut off from the
database for longer than a lease). The sweeper takes the lease over first, which fences the
old owner out should it still be alive, and then appends the terminal event: `failed` with
reason `worker_lost`, or `cancelled` if someone asked for that meanwhile. Of two sweepers
only one wins the lease, so only one writes. A queued response whose claim expired needs no
sweeping: it is claimable again, and the next worker to claim it generates it. A response in
an MCP tool loop is not ended but continued here, from its last recorded step (`_resume`).

A database that was away (a restart, a failover) stopped every owner renewing along with
it, so an outage does not count against a lease: a sweeper whose pass met the database away
leaves expired leases alone for a whole lease after it is back, time for every live owner
to renew (each does every third of a lease). A process cut off alone still loses its
responses, to the sweepers that never lost the database. The outage is seen by a pass that
fails: the passes come every half lease and a lease lapses only after two thirds of one
without a renewal, so an outage long enough to lapse a lease meets at least one pass.
"""

from __future__ import annotations

import logging
import random
import time

from domain.commands import cancel, fail
from domain.errors import DomainError, StoreUnavailable
from domain.reasons import FailReason
from domain.state import ResponseState
from domain.tools import builtin_offered, mcp_servers
from service.bundle import Bundle
from service.ports import Claim
from service.prompts.build import build_prompt
from service.prompts.history import history_for
from service.responses.reads import load_state
from service.work.periodic import Periodic

log = logging.getLogger("resplog.sweeper")

LOST_MESSAGE = "The process generating this response stopped before it finished."


class Sweeper:
    """Finds expired leases and ends their responses; runs every `every` seconds."""

    def __init__(
        self,
        svc: Bundle,
        *,
        every: float,
        batch: int = 100,
        loop_grace_s: float = 30.0,
        outage_grace_s: float = 0.0,
    ) -> None:
        self._svc = svc
        self.every = every
        self.batch = batch
        # After the database was away, expired leases are left this long (a lease).
        self.outage_grace_s = outage_grace_s
        self._away = False  # a pass met the database away and none has succeeded since
        self._back_at: float | None = None  # when a pass first found it back (monotonic)
        # At once on start-up, then every period, jittered so that replicas spread out.
        self._loop = Periodic(
            "sweep", self.sweep_once, lambda: self.every * random.uniform(0.75, 1.25), at_once=True
        )
        self.ended = 0  # responses ended so far (tests, benchmarks)
        # A process that cannot continue a tool loop (no MCP, no slots: an API-only replica)
        # leaves an orphaned one this long to a process that can, then ends it.
        self.loop_grace_s = loop_grace_s
        self._waiting: dict[str, float] = {}  # tool loops left to others: since when

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def sweep_once(self) -> int:
        """End every response found with an expired lease; how many this pass ended."""
        try:
            return await self._sweep()
        except StoreUnavailable:
            self._away = True
            raise

    def _in_outage_grace(self, now: float) -> bool:
        """Whether the database came back too recently for owners to have renewed."""
        if self._away:
            self._away, self._back_at = False, now
            log.warning(
                "the database is back: expired leases are left %.1fs for their owners to renew",
                self.outage_grace_s,
            )
        if self._back_at is not None and now - self._back_at >= self.outage_grace_s:
            self._back_at = None
        return self._back_at is not None

    async def _sweep(self) -> int:
        ended = 0
        expired = await self._svc.leases.expired(self.batch)
        now = time.monotonic()
        if self._in_outage_grace(now):
            return 0
        self._waiting = {rid: at for rid, at in self._waiting.items() if rid in expired}
        for rid in expired:
            if self._svc.runner.get(rid) is not None:
                continue  # ours and alive: the renewal is late (the database was away)
            if not self._can_resume() and await self._leave_to_others(rid, now):
                continue
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
        if claim.cancel is None and await self._resume(claim, state):
            svc.runner.observer.swept("resumed")
            return True
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
        svc.runner.observer.swept("ended" if claim.cancel is None else "cancelled")
        return True

    def _can_resume(self) -> bool:
        return self._svc.runner.tools is not None and self._svc.keeper.free() > 0

    async def _leave_to_others(self, rid: str, now: float) -> bool:
        """Whether an orphaned tool loop is left, for now, to a process that can go on."""
        try:
            state = await load_state(self._svc, rid)
        except DomainError:
            return False
        tools = [] if state.response is None else state.response.tools
        if not (mcp_servers(tools) or builtin_offered(tools)):
            return False
        since = self._waiting.setdefault(rid, now)
        return now - since < self.loop_grace_s

    async def _resume(self, claim: Claim, state: ResponseState) -> bool:
        """A tool loop (docs/mcp.md) goes on here from its last recorded step instead of
        ending: its state is the log. Only where this process runs MCP tools and has a slot."""
        svc = self._svc
        resp, facts = state.response, state.facts
        if (
            svc.runner.tools is None
            or resp is None
            or facts is None
            or state.status != "in_progress"
            or not svc.runner.tools.runs(resp.tools)
            or svc.keeper.free() <= 0
        ):
            return False
        try:
            history = await history_for(svc, resp, facts.owner, facts.input)
        except DomainError:
            return False
        prompt = build_prompt(resp, facts.input, history, facts.include)
        svc.keeper.launch(claim, state, prompt)
        log.warning("took over the tool loop of %s: its process is gone", resp.id)
        return True
