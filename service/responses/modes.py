"""A create in its modes: a plain response waited for to its final object, or a response's
events as they are logged (streamed, or over a WebSocket), its tail taken before it starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from domain.fold.replay import project
from domain.generation import Turn
from domain.objects import ResponseObject
from domain.reasons import CancelReason
from service.bundle import Bundle
from service.ports import Batches
from service.responses.create import Started, create_response, new_response_id
from service.responses.reads import close_tail
from service.wire.create_request import CreateRequest


async def create_and_wait(
    svc: Bundle,
    req: CreateRequest,
    owner: str,
    *,
    client_gone: Callable[[], Awaitable[object]] | None = None,
) -> ResponseObject:
    """Create a plain response and wait for its end: the final object.

    If `client_gone()` completes first (the client closed the connection), the generation is
    cancelled (reason `client_disconnected`), as a stream's is: nobody could read it, nor
    cancel it (a plain response's id reaches its client only with the final object).
    """
    started = await create_response(svc, req, owner)
    generation = started.generation
    assert generation is not None  # a plain response runs where it was created
    if client_gone is None:
        return project(await generation.wait())
    waiting = asyncio.ensure_future(generation.wait())
    gone = asyncio.ensure_future(client_gone())
    try:
        await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            svc.runner.request_cancel(generation.response_id, CancelReason.CLIENT_DISCONNECTED)
        return project(await waiting)
    finally:
        gone.cancel()
        waiting.cancel()  # only the wait: the generation is shielded from it


async def create_and_stream(svc: Bundle, req: CreateRequest, owner: str) -> Batches:
    """Create a response and tail its log from the first event, in batches.

    A client that stops reading before the end stops a plain response's generation (it
    ends `cancelled`, reason `client_disconnected`): nobody could ever read it otherwise.
    A background response keeps running; its client may resume with `starting_after`.
    """
    started, tail = await create_tailed(svc, req, owner)
    assert started.state.response is not None
    return tail_new(svc, started.state.response.id, background=req.background, tail=tail)


async def create_tailed(
    svc: Bundle, req: CreateRequest, owner: str, *, history: list[Turn] | None = None
) -> tuple[Started, Batches]:
    """`create_response`, with a tail of the new stream taken before its first append, so
    that the store hands it what this process commits rather than reading it back (one
    read less per streaming create; see `EventStore.subscribe`'s `new`)."""
    rid = new_response_id(svc.clock())
    tail = svc.store.subscribe_batches(rid, -1, new=True)
    try:
        started = await create_response(svc, req, owner, history=history, rid=rid)
    except BaseException:
        await close_tail(tail)
        raise
    return started, tail


async def tail_new(svc: Bundle, rid: str, *, background: bool, tail: Batches) -> Batches:
    """The log of a response just created, from its first event (`tail`, taken at its
    creation by `create_tailed`); a reader that leaves before the end stops it unless it
    is a background response (see `create_and_stream`)."""
    finished = False
    try:
        async for batch in tail:
            if batch:  # an empty one: the tail is idle
                finished = batch[-1].terminal
            yield batch
    finally:
        await close_tail(tail)
        if not finished and not background:
            svc.runner.request_cancel(rid, CancelReason.CLIENT_DISCONNECTED)
