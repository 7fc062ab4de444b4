"""Creating a response: the request recorded as the stream's first events, the
conversation it continues rebuilt from the log, and generation handed to the runner (a
background response: to this process's runner if it has a free slot, leased to it by the
insert that creates it, else to the queue that every process's workers claim from); then,
by mode, the new response's object, its final object, or its events as they are logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from domain.commands import create, prepare
from domain.compaction import COMPACTION_FACT, compacted, from_last_compaction
from domain.errors import InvalidRequest
from domain.events import RequestFacts
from domain.fold.replay import project
from domain.generation import Compaction, Prompt, Turn
from domain.objects import (
    INPUT_ID_PREFIX,
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    InputCustomToolCall,
    InputFile,
    InputFunctionCall,
    InputImage,
    InputItem,
    InputMessage,
    OutputItem,
    ResponseObject,
)
from domain.reasons import CancelReason
from domain.state import Decision, ResponseState
from domain.tools import mcp_servers, offered
from domain.truncation import FACT as TRUNCATION_FACT
from domain.truncation import Truncation, cut
from service.bundle import Bundle
from service.ids import new_id
from service.ports import Batches, Claim
from service.prompts.history import history_for
from service.prompts.references import resolve_with_aside
from service.prompts.window import fit
from service.reasoning.sealing import check_sealed
from service.responses.reads import close_tail
from service.wire.create_request import CreateRequest
from service.wire.set_aside import SET_ASIDE
from service.work.runner import Generation


def new_response_id(now: float) -> str:
    return new_id("resp", now)


class Started(msgspec.Struct, frozen=True):
    """A created response: its first state and, if this process runs it, the generation
    writing the rest (a background response may be left to another process's worker)."""

    state: ResponseState
    generation: Generation | None

    @property
    def response(self) -> ResponseObject:
        return project(self.state)


async def create_response(
    svc: Bundle,
    req: CreateRequest,
    owner: str,
    *,
    history: list[Turn] | None = None,
    rid: str | None = None,
) -> Started:
    """Record the request as the stream's first events, then start generating.

    `history` is the conversation `previous_response_id` ends when the caller already
    holds it (a WebSocket connection's cache of its last response); else it is read from
    the log. `rid`: the new response's id, when the caller made it (`create_tailed`)."""
    check_served(svc, req.response.model)
    if history is None:
        history = await history_for(svc, req.response, owner, req.input)
    items, extra = await resolve_with_aside(svc, req.input, req.extra, owner)
    check_sealed(svc.sealer, items)
    check_media(svc, req.response.model, items)
    check_calls(history, items)
    if svc.runner.tools is None and mcp_servers(req.response.tools):
        raise InvalidRequest(
            "This server does not run MCP tools.", param="tools", code="unsupported_parameter"
        )
    history = from_last_compaction(history)
    view = history, items
    compaction = await _compaction(svc, req, history, items, owner)
    if compaction is not None:  # made by a response of its own, before this one starts
        extra = {**extra, COMPACTION_FACT: msgspec.to_builtins(compaction)}
        view = compacted(history, items, compaction)
    truncation = (await fit(svc, req.response, *view)).truncation
    if truncation is not None:  # the input is kept whole, as sent; the cut is a fact
        extra = {**extra, TRUNCATION_FACT: msgspec.to_builtins(truncation)}
    rid = rid or new_response_id(svc.clock())
    response = msgspec.structs.replace(req.response, id=rid, created_at=int(svc.clock()))
    extra = aside_ids(rid, extra)
    if req.secrets:
        extra = {**extra, "mcp_headers_sealed": _sealed_headers(svc, req.secrets)}
    facts = RequestFacts(
        owner=owner,
        input=assign_ids(rid, items),
        stream=req.stream,
        include=req.include,
        extra=extra,
        reasoning_events=svc.reasoning_events,
    )
    if not req.generate:  # recorded and completed at once; no engine is asked
        done = prepare(response, facts, now=int(svc.clock()))
        await svc.writer.create(rid, done.events)
        return Started(done.state, None)
    decision = create(response, facts)
    # A plain response is created `in_progress`, leased to this process by the insert that
    # creates it. A background one is too if this process has a slot free for it (held now,
    # so that its own worker cannot fill it meanwhile); else it waits in the queue for any
    # process's worker.
    prompt = prompt_from_facts(response, facts, history)
    if req.background and svc.keeper.reserve(rid):
        return Started(decision.state, await _run_here(svc, decision, prompt))
    if not req.background:
        return Started(decision.state, await _run_now(svc, decision, prompt))
    await svc.writer.append(rid, -1, decision.events, durable=True)
    await svc.bells.ring_work()
    return Started(decision.state, None)


async def _run_now(svc: Bundle, decision: Decision, prompt: Prompt) -> Generation:
    """Create a plain (or `stream`) response and generate it, the engine starting while its
    first events commit: the writer commits a stream's events in the order they were
    queued, so the generation's follow them, and a client is handed only committed events.
    What the commit costs (a flush interval and a round trip) then overlaps the engine's
    first token instead of coming before it. Returns once those first events committed (or
    raises why not, and the generation stops); a caller that goes away meanwhile cancels
    the generation (`client_disconnected`), since nobody could read or cancel it."""
    rid = prompt.response_id
    # Queued before the runner's task is even created: the generation's events follow them.
    commit = svc.writer.create(rid, decision.events)
    generation = svc.runner.launch(decision.state, prompt, created=commit)
    try:
        await asyncio.shield(commit)
    except asyncio.CancelledError:
        svc.runner.request_cancel(rid, CancelReason.CLIENT_DISCONNECTED)
        raise
    return generation


async def _run_here(svc: Bundle, decision: Decision, prompt: Prompt) -> Generation:
    """Create a background response leased to this process, in the slot held for it, and
    run it. A create whose caller goes away once its events are queued still runs it when
    they commit (they are the response's, accepted and leased here: nobody else may run
    it until that lease lapses); one whose events do not commit gives the slot back."""
    rid = prompt.response_id
    try:
        commit = svc.writer.create(rid, decision.events, lease=True)
    except BaseException:
        svc.keeper.release(rid)
        raise
    launched: list[Generation] = []

    def settle(done: asyncio.Future[None]) -> None:
        if done.cancelled() or done.exception() is not None:
            svc.keeper.release(rid)
        else:
            launched.append(svc.keeper.launch(Claim(rid), decision.state, prompt))

    commit.add_done_callback(settle)
    await asyncio.shield(commit)  # its callbacks, `settle` first, have run by now
    return launched[0]


async def _compaction(
    svc: Bundle, req: CreateRequest, history: list[Turn], items: list[InputItem], owner: str
) -> Compaction | None:
    from service.prompts.compaction import auto_compact  # it creates a response itself

    return await auto_compact(svc, req, history, items, owner)


def prompt_from_facts(response: ResponseObject, facts: RequestFacts, history: list[Turn]) -> Prompt:
    """The prompt of a recorded request: its input, and the compaction and cut its facts
    record, over the conversation it continues."""
    return build_prompt(
        response,
        facts.input,
        history,
        facts.include,
        recorded_truncation(facts),
        recorded_compaction(facts),
    )


def _hints(response: ResponseObject) -> dict[str, str]:
    given = {
        "prompt_cache_key": response.prompt_cache_key,
        "safety_identifier": response.safety_identifier,
        "service_tier": None if response.service_tier == "default" else response.service_tier,
    }
    return {k: v for k, v in given.items() if v}


def recorded_compaction(facts: RequestFacts) -> Compaction | None:
    """The compaction made at create, as its facts record it."""
    raw = facts.extra.get(COMPACTION_FACT)
    return None if raw is None else msgspec.convert(raw, Compaction)


def recorded_truncation(facts: RequestFacts) -> Truncation | None:
    """The cut `truncation: "auto"` made at create, as its facts record it."""
    raw = facts.extra.get(TRUNCATION_FACT)
    return None if raw is None else msgspec.convert(raw, Truncation)


def check_calls(history: list[Turn], items: list[InputItem]) -> None:
    """Every tool output answers a call the conversation holds (OpenAI's 400), rather than
    a response that fails when its engine cannot render the orphan."""
    earlier: list[InputItem | OutputItem] = []
    for turn in history:
        earlier += [*turn.input, *turn.output]
    calls = {
        item.call_id
        for item in [*earlier, *items]
        if isinstance(item, InputFunctionCall | FunctionCall | InputCustomToolCall | CustomToolCall)
    }
    for item in items:
        if not isinstance(item, FunctionCallOutput | CustomToolCallOutput):
            continue
        if item.call_id not in calls:
            raise InvalidRequest(
                f"No tool call found for function call output with call_id {item.call_id[:80]}.",
                param="input",
                code=None,
            )


def check_media(svc: Bundle, model: str, items: list[InputItem]) -> None:
    """Refuse, before anything is written, images or files an engine cannot be given."""
    kinds = {
        "image" if isinstance(part, InputImage) else "file"
        for item in items
        if isinstance(item, InputMessage)
        for part in item.content
        if isinstance(part, InputImage | InputFile)
    }
    for kind in sorted(kinds - svc.engine.media):
        raise InvalidRequest(
            f"The model '{model}' does not take {kind} input on this server (its engine, "
            f"{svc.engine.name}, is text only).",
            param="input",
            code="unsupported_value",
        )


def check_served(svc: Bundle, model: str) -> None:
    if not svc.engine.serves(model):
        raise InvalidRequest(
            f"The model '{model}' does not exist or is not served here; this server "
            f"serves: {', '.join(svc.engine.models())}.",
            param="model",
            code="model_not_found",
        )


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


def aside_ids(rid: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Give every input item set aside as sent (`SET_ASIDE`) an id, if it came without
    one, the way `assign_ids` does: `input_items` lists and pages them by id."""
    aside = extra.get(SET_ASIDE)
    if not aside:
        return extra
    suffix = rid.removeprefix("resp_")
    named = [
        {
            "at": a["at"],
            "item": a["item"]
            if a["item"].get("id")
            else {"id": f"item_{suffix}_in{a['at']}", **a["item"]},
        }
        for a in aside
    ]
    return {**extra, SET_ASIDE: named}


def assign_ids(rid: str, items: list[InputItem]) -> list[InputItem]:
    """Give every input item an id (kept if the client sent one), derived from the
    response id so the same request always yields the same log."""
    suffix = rid.removeprefix("resp_")
    return [
        item
        if item.id
        else msgspec.structs.replace(item, id=f"{INPUT_ID_PREFIX[type(item)]}_{suffix}_in{i}")
        for i, item in enumerate(items)
    ]


def build_prompt(
    response: ResponseObject,
    items: list[InputItem],
    history: list[Turn],
    include: list[str] | None = None,
    truncation: Truncation | None = None,
    compaction: Compaction | None = None,
) -> Prompt:
    """What an engine is asked: the settings the response echoes, the request's input items
    (from its facts) and the conversation before it, with what a compaction replaced given
    as its summary and less what `truncation: "auto"` cut (both recorded in the facts).
    The one place a `Prompt` is made."""
    if compaction is not None:
        history, items = compacted(history, items, compaction)
    history = from_last_compaction(history)
    if truncation is not None:
        kept = cut(history, items, truncation.dropped_turns, truncation.dropped_items)
        history, items = kept.history, kept.items
    return Prompt(
        response_id=response.id,
        model=response.model,
        instructions=response.instructions,
        history=history,
        input=items,
        tools=offered(response.tools),
        tool_choice=response.tool_choice,
        parallel_tool_calls=response.parallel_tool_calls,
        max_output_tokens=response.max_output_tokens,
        temperature=response.temperature,
        top_p=response.top_p,
        reasoning=response.reasoning,
        text=response.text,
        metadata=response.metadata,
        include=list(include or []),
        top_logprobs=response.top_logprobs or 0,
        presence_penalty=response.presence_penalty,
        frequency_penalty=response.frequency_penalty,
        hints=_hints(response),
        compaction=compaction,
    )


def _sealed_headers(svc: Bundle, secrets: dict[str, dict[str, str]]) -> str:
    """The `mcp` tools' headers as the log may hold them: sealed under the server's key
    (service/tools/mcploop.py opens them for the calls)."""
    if svc.runner.tools is None:
        raise InvalidRequest(
            "This server does not run MCP tools.", param="tools", code="unsupported_parameter"
        )
    return svc.runner.tools.seal(secrets)
