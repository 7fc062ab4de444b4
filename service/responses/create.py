"""Creating a response: the request, once its prompt's stages passed
(service/prompts/pipeline.py), recorded as the stream's first events, and generation handed
to the runner (a background response: to this process's runner if it has a free slot,
leased to it by the insert that creates it, else to the queue that every process's workers
claim from). Its modes (plain, streamed) are service/responses/modes.py.
"""

from __future__ import annotations

import asyncio

import msgspec

from domain.commands import create, prepare
from domain.errors import InvalidRequest
from domain.events import RequestFacts
from domain.fold.replay import project
from domain.generation import Prompt, Turn
from domain.objects import ResponseObject
from domain.reasons import CancelReason
from domain.state import Decision, ResponseState
from service.bundle import Bundle
from service.ids import new_id
from service.ports import Claim
from service.prompts.build import prompt_from_facts
from service.prompts.item_ids import aside_ids, assign_ids
from service.prompts.pipeline import Purpose, prepare_prompt
from service.wire.create_request import CreateRequest
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
    prepared = await prepare_prompt(
        svc, req, owner, Purpose.CREATE, history=history, summarise=_summary
    )
    rid = rid or new_response_id(svc.clock())
    # The prepared response: its prompt template's (service/prompts/template.py) read in.
    response = msgspec.structs.replace(prepared.response, id=rid, created_at=int(svc.clock()))
    extra = aside_ids(rid, prepared.extra)
    if req.secrets:
        extra = {**extra, "mcp_headers_sealed": _sealed_headers(svc, req.secrets)}
    facts = RequestFacts(
        owner=owner,
        input=assign_ids(rid, prepared.items),
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
    prompt = prompt_from_facts(response, facts, prepared.history)
    if req.background and svc.keeper.reserve(rid):
        return Started(decision.state, await _run_here(svc, decision, prompt))
    if not req.background:
        return Started(decision.state, await _run_now(svc, decision, prompt))
    await svc.writer.append(rid, -1, decision.events, durable=True)
    await svc.bells.ring_work()
    return Started(decision.state, None)


async def _summary(svc: Bundle, req: CreateRequest, owner: str) -> ResponseObject:
    """A compaction's summarising response, created and run here to its final object (the
    compaction stage is given it: service/prompts/compaction.py `Summarise`)."""
    generation = (await create_response(svc, req, owner)).generation
    assert generation is not None  # a plain response runs where it was created
    return project(await generation.wait())


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


def check_served(svc: Bundle, model: str) -> None:
    """Refuse, before anything is read or written, a model the engine does not serve (the
    first check of a create, a token count and a compaction)."""
    if not svc.engine.serves(model):
        raise InvalidRequest(
            f"The model '{model}' does not exist or is not served here; this server "
            f"serves: {', '.join(svc.engine.models())}.",
            param="model",
            code="model_not_found",
        )


def _sealed_headers(svc: Bundle, secrets: dict[str, dict[str, str]]) -> str:
    """The `mcp` tools' headers as the log may hold them: sealed under the server's key
    (service/tools/mcploop.py opens them for the calls)."""
    if svc.runner.tools is None:
        raise InvalidRequest(
            "This server does not run MCP tools.", param="tools", code="unsupported_parameter"
        )
    return svc.runner.tools.seal(secrets)
