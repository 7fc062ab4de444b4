"""The claim loop: takes queued background responses (left by any process) while this
process has free slots, rebuilds each one's prompt from its log, and launches it.

Woken by the work doorbell, by a slot coming free, and by a poll: a doorbell can be lost
(the listener was reconnecting), the poll bounds how long queued work can wait for it.
"""

from __future__ import annotations

import asyncio
import logging

from domain.commands import fail
from domain.errors import DomainError
from domain.reasons import FailReason
from domain.state import ResponseState
from service.bundle import Bundle
from service.ports import Claim
from service.prompts.build import prompt_from_facts
from service.prompts.history import history_for
from service.responses.reads import load_state
from service.work.periodic import Periodic

log = logging.getLogger("resplog.worker")


class Worker:
    """Claims and launches queued background responses for this process."""

    def __init__(self, svc: Bundle, *, poll_s: float = 1.0) -> None:
        self._svc = svc
        self.poll_s = poll_s
        self._loop = Periodic("claiming queued work", self.claim_once, lambda: self.poll_s)
        self.claimed = 0  # responses claimed so far (tests, benchmarks)

    def wake(self) -> None:
        self._loop.kick()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        """Stop claiming; a claim being launched finishes launching first (it is shielded)."""
        await self._loop.stop()

    async def claim_once(self) -> int:
        """Claim and launch as many queued responses as there are free slots."""
        free = self._svc.keeper.free()
        if free <= 0:
            return 0
        claims = await self._svc.leases.claim(free)
        if claims:
            self._svc.runner.observer.claimed(len(claims))
        for claim in claims:
            # Shielded: a claim in hand is launched even if the loop is being stopped.
            await asyncio.shield(self._start(claim))
        self.claimed += len(claims)
        if len(claims) == free:
            self.wake()  # there may be more
        return len(claims)

    async def _start(self, claim: Claim) -> None:
        svc = self._svc
        try:
            state = await load_state(svc, claim.response_id)
        except Exception as exc:  # its lease lapses and it is claimed again
            log.warning("cannot load claimed %s (%s)", claim.response_id, exc)
            return
        if state.status != "queued" or state.response is None or state.facts is None:
            return  # it moved on meanwhile (ended by a cancel)
        try:
            history = await history_for(svc, state.response, state.facts.owner, state.facts.input)
        except DomainError as exc:
            await _unstartable(svc, state, exc)
            return
        facts = state.facts
        prompt = prompt_from_facts(state.response, facts, history)
        if svc.keeper.closed:  # shutting down: its claim lapses and another process takes it
            log.info("not launching %s: shutting down", claim.response_id)
            return
        svc.keeper.launch(claim, state, prompt)


async def _unstartable(svc: Bundle, state: ResponseState, exc: DomainError) -> None:
    """Its conversation cannot be rebuilt any more (an earlier turn was deleted): end it."""
    assert state.response is not None
    d = fail(
        state,
        code="previous_response_not_found",
        message=f"The conversation could not be loaded: {exc}",
        reason=FailReason.PROMPT_UNAVAILABLE,
        detail=repr(exc),
    )
    try:
        await svc.writer.append(state.response.id, state.version, d.events)
    except DomainError as failed:
        log.warning("could not end unstartable %s (%s)", state.response.id, failed)
