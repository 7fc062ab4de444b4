"""The Responses use-cases: create, retrieve, cancel, delete, input items, conversation.

Each one loads from the log or the read model, decides with the aggregate, appends, and
hands generation to the runner (a background response: to this process's runner if it has
a free slot and wins the lease, else to the queue that every process's workers claim from).
Visibility is one rule, applied in `_visible`: a response is seen only by its owner, and
not after it was deleted or if it was never stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Literal

import msgspec

from domain.errors import Conflict, InvalidRequest, InvalidTransition, NotFound
from domain.events import RequestFacts, ResponseCreated
from domain.generation import Prompt, Turn
from domain.objects import (
    FunctionCallOutput,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    ResponseObject,
)
from domain.response import ResponseState, cancel, create, project, replay
from service.leases import LeaseKeeper
from service.ports import (
    Doorbells,
    Engine,
    EventStore,
    EventWriter,
    Leases,
    ResponseIndex,
    ResponseRow,
)
from service.runner import Generation, Runner
from service.wire import CreateRequest

log = logging.getLogger("resplog.responses")
_snapshot = msgspec.json.Decoder(ResponseObject)
MAX_CHAIN = 1000
UNFINISHED = ("queued", "in_progress")


class Services(msgspec.Struct, kw_only=True):
    """What the use-cases need, built by a composition root."""

    store: EventStore
    writer: EventWriter
    index: ResponseIndex
    engine: Engine
    runner: Runner
    leases: Leases
    bells: Doorbells
    keeper: LeaseKeeper
    # How long a cancel (or delete) of a response running in another process waits for
    # that process to record the cancellation before answering with what is there.
    cancel_wait_s: float = 10.0
    clock: Callable[[], float] = time.time


def new_response_id() -> str:
    return f"resp_{uuid.uuid4().hex}{uuid.uuid4().hex[:16]}"


class Started(msgspec.Struct, frozen=True):
    """A created response: its first state and, if this process runs it, the generation
    writing the rest (a background response may be left to another process's worker)."""

    state: ResponseState
    generation: Generation | None

    @property
    def response(self) -> ResponseObject:
        return project(self.state)


async def create_response(svc: Services, req: CreateRequest, owner: str) -> Started:
    """Record the request as the stream's first events, then start generating."""
    model = req.response.model
    if not svc.engine.serves(model):
        raise InvalidRequest(
            f"The model '{model}' does not exist or is not served here; this server "
            f"serves: {', '.join(svc.engine.models())}.",
            param="model",
            code="model_not_found",
        )
    history = await load_history(svc, req.response.previous_response_id, owner)
    rid = new_response_id()
    response = msgspec.structs.replace(req.response, id=rid, created_at=int(svc.clock()))
    facts = RequestFacts(
        owner=owner,
        input=assign_ids(rid, req.input),
        stream=req.stream,
        include=req.include,
        extra=req.extra,
    )
    decision = create(response, facts)
    await svc.writer.append(rid, -1, decision.events, durable=True)
    prompt = build_prompt(response, facts.input, history)
    if not req.background:  # leased to this process by the insert that created it
        return Started(decision.state, svc.runner.launch(decision.state, prompt))
    return Started(decision.state, await _run_here(svc, decision.state, prompt))


async def _run_here(svc: Services, state: ResponseState, prompt: Prompt) -> Generation | None:
    """Run a new background response in this process if it has a free slot (and wins the
    lease: a polling worker elsewhere may be first); otherwise it waits in the queue and
    the workers of every process are rung."""
    if svc.keeper.free() > 0:
        claim = await svc.leases.acquire(prompt.response_id)
        return None if claim is None else svc.keeper.launch(claim, state, prompt)
    await svc.bells.ring_work()
    return None


def assign_ids(rid: str, items: list[InputItem]) -> list[InputItem]:
    """Give every input item an id (kept if the client sent one), derived from the
    response id so the same request always yields the same log."""
    suffix = rid.removeprefix("resp_")
    prefix = {
        InputMessage: "msg",
        FunctionCallOutput: "fco",
        InputFunctionCall: "fc",
        InputReasoning: "rs",
    }
    return [
        item
        if item.id
        else msgspec.structs.replace(item, id=f"{prefix[type(item)]}_{suffix}_in{i}")
        for i, item in enumerate(items)
    ]


def build_prompt(response: ResponseObject, items: list[InputItem], history: list[Turn]) -> Prompt:
    """What an engine is asked: the settings the response echoes, the request's input items
    (from its facts) and the conversation before it. The one place a `Prompt` is made."""
    return Prompt(
        response_id=response.id,
        model=response.model,
        instructions=response.instructions,
        history=history,
        input=items,
        tools=response.tools,
        tool_choice=response.tool_choice,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=response.max_output_tokens,
        temperature=response.temperature,
        top_p=response.top_p,
        reasoning=response.reasoning,
        text=response.text,
        metadata=response.metadata,
    )


def _visible(row: ResponseRow | None, owner: str) -> ResponseRow:
    if row is None or row.deleted or not row.store or row.owner != owner:
        raise NotFound("No response found with that id.")
    return row


async def _row(svc: Services, response_id: str, owner: str) -> ResponseRow:
    return _visible(await svc.index.get(response_id), owner)


async def load_history(svc: Services, previous_id: str | None, owner: str) -> list[Turn]:
    """The conversation that `previous_id` ends, oldest turn first, from the log alone."""
    turns: list[Turn] = []
    while previous_id is not None:
        if len(turns) >= MAX_CHAIN:
            raise InvalidRequest(
                f"The conversation is longer than {MAX_CHAIN} responses.",
                param="previous_response_id",
                code="invalid_value",
            )
        try:
            row = await _row(svc, previous_id, owner)
        except NotFound:
            raise NotFound(f"Previous response with id '{previous_id}' not found.") from None
        if row.status in ("queued", "in_progress"):
            raise InvalidRequest(
                f"Previous response '{previous_id}' is still {row.status}; wait until it ends.",
                param="previous_response_id",
                code="previous_response_not_finished",
            )
        created = await _created(svc, previous_id)
        final = _snapshot.decode(row.snapshot)
        assert created.facts is not None
        turns.append(
            Turn(
                response_id=previous_id,
                instructions=final.instructions,
                input=created.facts.input,
                output=final.output,
            )
        )
        previous_id = final.previous_response_id
    turns.reverse()
    return turns


async def _created(svc: Services, response_id: str) -> ResponseCreated:
    first = await svc.store.read(response_id, after=-1, limit=1)
    event = first[0].event() if first else None
    if not isinstance(event, ResponseCreated) or event.facts is None:
        raise InvalidTransition(f"stream {response_id} does not start with its request")
    return event


async def retrieve(svc: Services, response_id: str, owner: str) -> ResponseObject:
    """The projection: the cached final object, or the fold of a running response's log."""
    row = await _row(svc, response_id, owner)
    if row.status in ("queued", "in_progress"):
        return project(await load_state(svc, response_id))
    return _snapshot.decode(row.snapshot)


async def retrieve_raw(svc: Services, response_id: str, owner: str) -> bytes:
    """Like `retrieve`, as JSON bytes; a finished response is served from its row as is."""
    row = await _row(svc, response_id, owner)
    if row.status in ("queued", "in_progress"):
        return msgspec.json.encode(project(await load_state(svc, response_id)))
    return row.snapshot


async def load_state(svc: Services, response_id: str) -> ResponseState:
    return replay(e.event() for e in await svc.store.read(response_id))


async def check_readable(svc: Services, response_id: str, owner: str) -> ResponseRow:
    """For stream and event reads: the response exists and the caller may see it."""
    return await _row(svc, response_id, owner)


async def cancel_response(svc: Services, response_id: str, owner: str) -> ResponseObject:
    """Cancel a background response; idempotent once it has ended (returns the final
    object)."""
    row = await _row(svc, response_id, owner)
    if not row.background:
        raise InvalidRequest(
            "Only responses created with background=true can be cancelled.",
            param="response_id",
            code="invalid_request",
        )
    if row.status in UNFINISHED:
        await stop_response(svc, row, "cancelled_by_user")
    return await retrieve(svc, response_id, owner)


async def stop_response(svc: Services, row: ResponseRow, reason: str) -> None:
    """Stop a running response wherever it runs, and wait (a while) until its log ends.

    Here: cancel its task. Nowhere (still queued, or its process is gone): take its lease
    and append the cancellation. In another process: flag its row and ring that process's
    cancel doorbell; it stops the engine and appends the cancellation itself, so the stream
    keeps one writer.
    """
    gen = svc.runner.request_cancel(row.id, reason)
    if gen is not None:
        await gen.wait()
        return
    claim = await svc.leases.acquire(row.id)
    if claim is not None:
        await _end_here(svc, row.id, reason)
        return
    await svc.index.request_cancel(row.id, reason)
    await _wait_for_end(svc, row.id, row.version)


async def _end_here(svc: Services, response_id: str, reason: str) -> None:
    state = await load_state(svc, response_id)
    if state.terminal:
        return
    try:
        await svc.writer.append(response_id, state.version, cancel(state, reason=reason).events)
    except Conflict:  # it moved meanwhile (its worker started after all): it ends itself
        log.info("cancel of %s raced its worker; waiting for it instead", response_id)
        await svc.index.request_cancel(response_id, reason)
        await _wait_for_end(svc, response_id, state.version)


async def _wait_for_end(svc: Services, response_id: str, after: int) -> None:
    tail = svc.store.subscribe(response_id, after)
    try:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(svc.cancel_wait_s):
                async for event in tail:
                    if event.terminal:
                        return
    finally:
        aclose = getattr(tail, "aclose", None)
        if aclose is not None:
            await aclose()


class Deleted(msgspec.Struct, frozen=True):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


async def delete_response(svc: Services, response_id: str, owner: str) -> Deleted:
    """Hide a response from the API; a running one is cancelled first. The log stays."""
    row = await _row(svc, response_id, owner)
    if row.status in UNFINISHED:
        await stop_response(svc, row, "deleted")
    await svc.index.mark_deleted(response_id)
    return Deleted(id=response_id)


class ItemPage(msgspec.Struct, frozen=True):
    data: list[InputItem]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


async def list_input_items(
    svc: Services,
    response_id: str,
    owner: str,
    *,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
) -> ItemPage:
    """OpenAI's cursor list of the items the request sent (its own input, not the chain)."""
    if not 1 <= limit <= 100:
        raise InvalidRequest(
            "Invalid 'limit': must be between 1 and 100.", param="limit", code="invalid_value"
        )
    await _row(svc, response_id, owner)
    created = await _created(svc, response_id)
    assert created.facts is not None
    items = list(created.facts.input)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [i.id for i in items]
        if after not in ids:
            raise InvalidRequest(
                f"Invalid 'after': no input item '{after}' in this response.",
                param="after",
                code="invalid_value",
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return ItemPage(
        data=page,
        first_id=page[0].id if page else None,
        last_id=page[-1].id if page else None,
        has_more=len(items) > limit,
    )
