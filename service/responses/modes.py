"""A create in its modes: a plain response waited for to its final object, or a response's
events as they are logged (streamed, or over a WebSocket), its tail taken before it starts.

An engine that refuses a request before any output (sglang streams its validation's
refusals as an error chunk after its 200: docs/engines.md) fails the response in the log
like any engine failure, but the client of a plain or streamed create is answered as
OpenAI answers a request it refuses, with HTTP 400 and the error, as long as nothing of the
response went out yet: a plain create's answer is its final object, and a stream's first
events are held until the response's first output or its end (at most `REFUSAL_HOLD_S`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from domain.errors import InvalidRequest
from domain.events import ResponseFailed
from domain.fold.replay import project
from domain.generation import Turn
from domain.objects import ResponseObject
from domain.reasons import CancelReason
from service.bundle import Bundle
from service.ports import Batches, StoredEvent
from service.prompts.window import too_long
from service.responses.create import Started, create_response, new_response_id
from service.responses.reads import close_tail
from service.wire.create_request import CreateRequest
from service.work.runner import Generation

# What an engine's refusal of a request is (adapters/engines: a 4xx answer, sglang's
# in-stream 4xx): the request's fault, which OpenAI answers with a 400.
REFUSALS = frozenset({"engine_bad_request", "context_length_exceeded"})
# How long a streamed create's first events wait for the response's first output, so that
# an engine's refusal can still be a 400: sglang refuses in its tokenizer manager, before
# it schedules the request, so within milliseconds of being asked.
REFUSAL_HOLD_S = 0.5
_STARTS = frozenset({"response.created", "response.queued", "response.in_progress"})


def refusal(generation: Generation | None, final: ResponseObject) -> InvalidRequest | None:
    """The 400 a create is answered with when its engine refused it before any output."""
    failure = None if generation is None else generation.failure
    if final.status != "failed" or final.output or failure is None:
        return None
    if failure.code == "context_length_exceeded":
        return too_long()
    if failure.code not in REFUSALS:
        return None
    said = f": {failure.said}" if failure.said else "."
    return InvalidRequest(f"The model server refused the request{said}", code="invalid_value")


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
        return _answer(generation, project(await generation.wait()))
    waiting = asyncio.ensure_future(generation.wait())
    gone = asyncio.ensure_future(client_gone())
    try:
        await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            svc.runner.request_cancel(generation.response_id, CancelReason.CLIENT_DISCONNECTED)
        return _answer(generation, project(await waiting))
    finally:
        gone.cancel()
        waiting.cancel()  # only the wait: the generation is shielded from it


def _answer(generation: Generation, final: ResponseObject) -> ResponseObject:
    refused = refusal(generation, final)
    if refused is not None:
        raise refused
    return final


async def create_and_stream(svc: Bundle, req: CreateRequest, owner: str) -> Batches:
    """Create a response and tail its log from the first event, in batches.

    A client that stops reading before the end stops a plain response's generation (it
    ends `cancelled`, reason `client_disconnected`): nobody could ever read it otherwise.
    A background response keeps running; its client may resume with `starting_after`.
    """
    started, tail = await create_tailed(svc, req, owner)
    assert started.state.response is not None
    events = tail_new(svc, started.state.response.id, background=req.background, tail=tail)
    if req.background or started.generation is None:
        return events
    return await _held(events, started.generation)


async def _held(events: Batches, generation: Generation) -> Batches:
    """`events`, its first batches read ahead until the response's first output or its
    end, for at most `REFUSAL_HOLD_S`: a response its engine refused before any output is
    then `refusal`'s 400 (raised here, nothing having been sent), else the batches go on."""
    held: list[list[StoredEvent]] = []
    deadline = asyncio.get_running_loop().time() + REFUSAL_HOLD_S
    following: asyncio.Future[list[StoredEvent]] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(events))
            left = deadline - asyncio.get_running_loop().time()
            done, _ = await asyncio.wait({following}, timeout=max(0.0, left))
            if not done:
                break  # the engine is slow to start: the stream goes out now
            try:
                batch = following.result()
            except StopAsyncIteration:
                following = None
                break
            following = None
            held.append(batch)
            if any(event.terminal for event in batch):
                end = batch[-1].event()
                if isinstance(end, ResponseFailed):
                    refused = refusal(generation, end.response)
                    if refused is not None:
                        raise refused
                break
            if any(event.type not in _STARTS for event in batch):
                break
    except BaseException:
        await _close(following, events)
        raise
    return _resumed(held, following, events)


async def _close(following: asyncio.Future[list[StoredEvent]] | None, events: Batches) -> None:
    """Close `events`, once the read ahead of it (if any) has stopped: a generator cannot
    be closed while another task runs it."""
    if following is not None and not following.done():
        following.cancel()
        await asyncio.wait({following})
    await events.aclose()


async def _resumed(
    held: list[list[StoredEvent]],
    following: asyncio.Future[list[StoredEvent]] | None,
    events: Batches,
) -> Batches:
    try:
        for batch in held:
            yield batch
        if following is not None:
            try:
                yield await following
            except StopAsyncIteration:
                return
        async for batch in events:
            yield batch
    finally:
        await _close(following, events)


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
