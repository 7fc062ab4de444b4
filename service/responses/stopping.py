"""Stopping a response wherever it runs: cancel (a background response) and delete (which
stops a running response first, then hides it; its log stays, for audit)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Literal

import msgspec

from domain.commands import cancel
from domain.errors import Conflict, InvalidRequest
from domain.objects import ResponseObject
from domain.reasons import CancelReason
from service.bundle import Bundle
from service.ports import ResponseRow
from service.responses.reads import UNFINISHED, close_tail, load_state, retrieve, visible_row

log = logging.getLogger("resplog.responses")


async def cancel_response(svc: Bundle, response_id: str, owner: str) -> ResponseObject:
    """Cancel a background response; idempotent once it has ended (returns the final
    object)."""
    row = await visible_row(svc, response_id, owner)
    if not row.background:
        raise InvalidRequest(
            "Only responses created with background=true can be cancelled.",
            param="response_id",
            code="invalid_request",
        )
    if row.status in UNFINISHED:
        await stop_response(svc, row, CancelReason.CANCELLED_BY_USER)
    return await retrieve(svc, response_id, owner)


async def stop_response(svc: Bundle, row: ResponseRow, reason: CancelReason) -> None:
    """Stop a running response wherever it runs, and wait (a while) until its log ends.

    Here: cancel its task. Nowhere (still queued, or its process is gone): take its lease
    and append the cancellation. In another process: flag its row and ring that process's
    cancel doorbell; it stops the engine and appends the cancellation itself, so the stream
    keeps one writer.

    A generation running here is cancelled before anything else: its engine stops without
    waiting for a round trip and a commit of the database (the real-engine suite once saw
    that commit take 0.8 s, while vLLM's CPU workers held both cores, and the engine went
    on generating meanwhile). The row is flagged whatever the path, before the answer, so
    its `cancel_requested_at` and reason read the same for a cancel served here as for one
    another replica served; then the runner is asked again, since a claim may have been
    launched here meanwhile.
    """
    gen = svc.runner.request_cancel(row.id, reason)
    await svc.index.request_cancel(row.id, reason)
    gen = gen or svc.runner.request_cancel(row.id, reason)
    if gen is not None:
        await gen.wait()
        return
    claim = await svc.leases.acquire(row.id)
    if claim is not None:
        await _end_here(svc, row.id, reason)
        return
    await _wait_for_end(svc, row.id, row.version)


async def _end_here(svc: Bundle, response_id: str, reason: CancelReason) -> None:
    state = await load_state(svc, response_id)
    if state.terminal:
        return
    try:
        await svc.writer.append(response_id, state.version, cancel(state, reason=reason).events)
    except Conflict:  # it moved meanwhile (its worker started after all): it ends itself
        log.info("cancel of %s raced its worker; waiting for it instead", response_id)
        await svc.index.request_cancel(response_id, reason)
        await _wait_for_end(svc, response_id, state.version)


async def _wait_for_end(svc: Bundle, response_id: str, after: int) -> None:
    tail = svc.store.subscribe(response_id, after)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(svc.cancel_wait_s):
                async for event in tail:
                    if event.terminal:
                        return
    finally:
        await close_tail(tail)


class Deleted(msgspec.Struct, frozen=True):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


async def delete_response(svc: Bundle, response_id: str, owner: str) -> Deleted:
    """Hide a response from the API; a running one is cancelled first. The log stays."""
    row = await visible_row(svc, response_id, owner)
    if row.status in UNFINISHED:
        await stop_response(svc, row, CancelReason.DELETED)
    await svc.index.mark_deleted(response_id)
    return Deleted(id=response_id)
