"""How a response's log folds its lifecycle events: created, queued, in progress, and its
one terminal event, whose snapshot must agree with the fold."""

from __future__ import annotations

from typing import Literal

import msgspec

from domain.events import (
    Event,
    LegacyResponseCancelled,
    ResponseCancelled,
    ResponseCompleted,
    ResponseCreated,
    ResponseFailed,
    ResponseIncomplete,
    ResponseInProgress,
    ResponseQueued,
    TerminalEvent,
)
from domain.fold.shared import Handler, fail, live_response, snapshot_check
from domain.objects import IncompleteDetails, ResponseError, ResponseObject, Usage
from domain.state import ResponseState

replace = msgspec.structs.replace


def terminal_snapshot(
    current: ResponseObject,
    status: Literal["completed", "failed", "cancelled", "incomplete"],
    *,
    completed_at: int | None,
    usage: Usage | None,
    error: ResponseError | None,
    incomplete_details: IncompleteDetails | None,
) -> ResponseObject:
    """The final response object: the folded output plus how it ended."""
    return replace(
        current,
        status=status,
        completed_at=completed_at,
        usage=usage,
        error=error,
        incomplete_details=incomplete_details,
    )


def _created(state: ResponseState, event: ResponseCreated) -> ResponseState:
    if state.response is not None:
        raise fail(state, event, "the response was already created")
    r = event.response
    want = "queued" if r.background else "in_progress"
    ended = r.error or r.incomplete_details or r.completed_at is not None
    if r.status != want or r.output or r.usage is not None or ended:
        raise fail(state, event, f"a new response must be {want} with no output")
    return ResponseState(version=event.sequence_number, response=r, facts=event.facts)


def _queued(state: ResponseState, event: ResponseQueued) -> ResponseState:
    resp = live_response(state, event)
    if resp.status != "queued" or state.version != 0:
        raise fail(state, event, "response.queued must follow response.created")
    snapshot_check(state, event, resp, event.response)
    return replace(state, version=event.sequence_number)


def _in_progress(state: ResponseState, event: ResponseInProgress) -> ResponseState:
    resp = live_response(state, event)
    if state.started:
        raise fail(state, event, "the response already started")
    snapshot_check(state, event, replace(resp, status="in_progress"), event.response)
    return replace(state, version=event.sequence_number, response=event.response, started=True)


_TERMINAL_STATUS: dict[type[Event], Literal["completed", "failed", "cancelled", "incomplete"]] = {
    ResponseCompleted: "completed",
    ResponseFailed: "failed",
    ResponseIncomplete: "incomplete",
    ResponseCancelled: "cancelled",
    LegacyResponseCancelled: "cancelled",
}


def _terminal(state: ResponseState, event: TerminalEvent) -> ResponseState:
    resp = live_response(state, event)
    if state.open_index is not None:
        raise fail(state, event, f"output item {state.open_index} is still open")
    status = _TERMINAL_STATUS[type(event)]
    got = event.response
    _check_ending(state, event, status, got)
    expected = terminal_snapshot(
        resp,
        status,
        completed_at=got.completed_at,
        usage=got.usage,
        error=got.error if status == "failed" else None,
        incomplete_details=got.incomplete_details if status == "incomplete" else None,
    )
    snapshot_check(state, event, expected, got)
    return replace(state, version=event.sequence_number, response=got)


def _check_ending(
    state: ResponseState, event: TerminalEvent, status: str, got: ResponseObject
) -> None:
    """How a response ended must agree with what its snapshot says about it."""
    if status in ("completed", "incomplete") and not state.started:
        raise fail(state, event, f"a response that never started cannot be {status}")
    if status == "failed" and got.error is None:
        raise fail(state, event, "a failed response must carry an error")
    if status == "incomplete" and got.incomplete_details is None:
        raise fail(state, event, "an incomplete response must say why")
    if (got.completed_at is None) == (status == "completed"):
        raise fail(state, event, "completed_at is set exactly when the response completed")


HANDLERS: dict[type[Event], Handler] = {
    ResponseCreated: _created,
    ResponseQueued: _queued,
    ResponseInProgress: _in_progress,
    ResponseCompleted: _terminal,
    ResponseFailed: _terminal,
    ResponseIncomplete: _terminal,
    ResponseCancelled: _terminal,
    LegacyResponseCancelled: _terminal,
}
