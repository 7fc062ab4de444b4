"""The leases of this process's generations: launching the background responses it claimed
(within its slots), renewing every lease it holds in one pass, and delivering cancellations
asked for by other processes to the runner.

One task renews all leases together (`Leases.renew` with every running id), every third of
the lease's lifetime, so a lease survives two missed passes. A pass also reports which
leases were lost (taken over after they expired: the generation is stopped, and the store's
guard would refuse its appends anyway) and which responses carry the cancel flag: that is
the fallback for a cancel doorbell that never arrived.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from domain.generation import Prompt
from domain.reasons import CancelReason
from domain.state import ResponseState
from service.ports import Claim, Leases
from service.work.periodic import Periodic
from service.work.runner import Generation, Runner

log = logging.getLogger("resplog.leases")

_EARLY_TTL = 60.0  # seconds a cancel for a not-yet-launched claim is remembered


def _nothing() -> None:
    pass


class LeaseKeeper:
    """Keeps this process's leases and its background slots."""

    def __init__(
        self,
        leases: Leases,
        runner: Runner,
        *,
        slots: int,
        renew_every: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._leases = leases
        self._runner = runner
        self.slots = slots
        self.renew_every = renew_every
        self._clock = clock
        self._background: set[str] = set()
        # Cancels whose doorbell came before the claimed response was launched here.
        self._early: dict[str, tuple[CancelReason, float]] = {}
        self._closed = False
        self._renewal = Periodic("lease renewal", self.renew_once, lambda: self.renew_every)
        self.on_free: Callable[[], None] = _nothing  # a background slot came free

    # --- background slots ---------------------------------------------------------------

    def free(self) -> int:
        """How many more background responses this process may run now."""
        return 0 if self._closed else max(0, self.slots - len(self._background))

    def reserve(self, rid: str) -> bool:
        """Hold a free background slot for a response this process is creating (its create
        leases it in the insert: `EventWriter.append`'s `lease`); False if none is free.
        `launch` then runs it in that slot; `release` gives the slot back if the create
        failed."""
        if self.free() <= 0:
            return False
        self._background.add(rid)
        return True

    def release(self, rid: str) -> None:
        """Give back the slot `reserve` held for a response that will not be launched."""
        if rid in self._background and self._runner.get(rid) is None:
            self._finished(rid)

    def close(self) -> None:
        """Take no more background work (shutdown)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def launch(self, claim: Claim, state: ResponseState, prompt: Prompt) -> Generation:
        """Run a claimed background response here; one cancelled meanwhile ends at once.

        A response this process already runs is not started twice: the one it runs is
        returned. (That once happened when this process's worker claimed a new background
        response between its create's commit and the create's own lease; two generations
        would both append, and the loser of the race stopped the winner's stream with it,
        found by tests/e2e/test_failover.py. A create now leases its response in the
        insert, `reserve`, so nothing can claim it between; the guard stays.)"""
        rid = claim.response_id
        running = self._runner.get(rid)
        if running is not None:
            return running
        gen = self._runner.launch(state, prompt)
        self._background.add(rid)
        assert gen.task is not None
        gen.task.add_done_callback(lambda _: self._finished(rid))
        early = self._early.pop(rid, None)
        reason = claim.cancel or (early[0] if early else None)
        if reason is not None:
            self._runner.request_cancel(rid, reason)
        return gen

    def _finished(self, rid: str) -> None:
        self._background.discard(rid)
        self.on_free()

    # --- cancellations ------------------------------------------------------------------

    def on_cancel(self, requests: list[tuple[str, CancelReason]] | None) -> None:
        """The cancel doorbell: stop these generations (None: check every lease now)."""
        if requests is None:
            self._renewal.kick()
            return
        now = self._clock()
        for rid, reason in requests:
            if self._runner.request_cancel(rid, reason) is None:
                self._early[rid] = (reason, now)
        self._forget_old(now)

    def _forget_old(self, now: float) -> None:
        for rid in [r for r, (_, at) in self._early.items() if now - at > _EARLY_TTL]:
            del self._early[rid]

    # --- renewal ------------------------------------------------------------------------

    async def renew_once(self) -> None:
        """One pass: extend every lease held, stop lost and cancelled generations."""
        ids = self._runner.running()
        if not ids:
            return
        renewal = await self._leases.renew(ids)
        for rid in ids:
            if rid not in renewal.held:
                if self._runner.request_cancel(rid, CancelReason.LEASE_LOST) is not None:
                    self._runner.observer.lease_lost()
                    log.warning("lost the lease on %s; stopping its generation", rid)
            elif rid in renewal.cancel:
                self._runner.request_cancel(rid, renewal.cancel[rid])

    def start(self) -> None:
        self._renewal.start()

    async def stop(self) -> None:
        await self._renewal.stop()
