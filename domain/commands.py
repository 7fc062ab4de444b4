"""The response's lifecycle commands: `create`, `start`, `fail`, `cancel`. Each is pure: it
takes the folded state, returns the events it decided on and the state after them; an engine's
output goes through the builder (`domain.builder`) instead."""

from __future__ import annotations

import msgspec

from domain.batch import Batch, require
from domain.builder.finish import finish, to_usage
from domain.builder.items import close_item
from domain.events import (
    EndFacts,
    RequestFacts,
    ResponseCancelled,
    ResponseCreated,
    ResponseFailed,
    ResponseInProgress,
    ResponseQueued,
)
from domain.fold.lifecycle import terminal_snapshot
from domain.generation import Finished, TokenUsage
from domain.objects import ResponseError, ResponseObject
from domain.state import Decision, ResponseState

replace = msgspec.structs.replace


def create(response: ResponseObject, facts: RequestFacts) -> Decision:
    """Record a new response: `response.created`, then `response.queued` or `.in_progress`."""
    status = "queued" if response.background else "in_progress"
    initial = replace(
        response,
        status=status,
        output=[],
        usage=None,
        error=None,
        incomplete_details=None,
        completed_at=None,
    )
    batch = Batch(ResponseState())
    batch.add(lambda n: ResponseCreated(sequence_number=n, response=initial, facts=facts))
    if response.background:
        batch.add(lambda n: ResponseQueued(sequence_number=n, response=initial))
    else:
        batch.add(lambda n: ResponseInProgress(sequence_number=n, response=initial))
    return batch.decision()


def prepare(response: ResponseObject, facts: RequestFacts, *, now: int) -> Decision:
    """Record a response that asks for no output (OpenAI's WebSocket `generate: false`)
    and complete it at once: no output, no tokens. It is a turn like any other, so a
    later request may continue it by `previous_response_id`."""
    made = create(response, facts)
    state, events = made.state, list(made.events)
    if state.status == "queued":
        started = start(state)
        state, events = started.state, [*events, *started.events]
    done = finish(state, Finished(reason="stop", usage=TokenUsage()), now=now)
    return Decision([*events, *done.events], done.state)


def start(state: ResponseState) -> Decision:
    """A queued (background) response begins generating."""
    resp = require(state, "queued")
    batch = Batch(state)
    batch.add(
        lambda n: ResponseInProgress(
            sequence_number=n, response=replace(resp, status="in_progress")
        )
    )
    return batch.decision()


def fail(
    state: ResponseState,
    *,
    code: str,
    message: str,
    reason: str,
    detail: str | None = None,
    usage: TokenUsage | None = None,
) -> Decision:
    """End the response as `failed`: `message` is for the client, `detail` for operators."""
    error = ResponseError(code=code, message=message)
    return _stop(state, ResponseFailed, EndFacts(reason=reason, detail=detail), usage, error)


def cancel(state: ResponseState, *, reason: str, usage: TokenUsage | None = None) -> Decision:
    """End the response as `cancelled` (a user's cancel, or the client went away)."""
    return _stop(state, ResponseCancelled, EndFacts(reason=reason), usage)


def _stop(
    state: ResponseState,
    kind: type[ResponseFailed | ResponseCancelled],
    facts: EndFacts,
    usage: TokenUsage | None,
    error: ResponseError | None = None,
) -> Decision:
    """End a response that did not finish (queued, or cut short): the open item is closed
    `incomplete`, and the terminal event carries the final snapshot and the hidden facts."""
    require(state, "queued", "in_progress")
    batch = Batch(state)
    close_item(batch, "incomplete")
    final = terminal_snapshot(
        batch.response,
        "failed" if kind is ResponseFailed else "cancelled",
        completed_at=None,
        usage=to_usage(usage) if usage else None,
        error=error,
        incomplete_details=None,
    )
    batch.add(lambda n: kind(sequence_number=n, response=final, facts=facts))
    return batch.decision()
