"""The fold of a response's log: `evolve` (one event, by its family's handler), `replay` (a
stream) and `project`.

Lifecycle: queued -> in_progress -> completed | failed | cancelled | incomplete, and
queued -> cancelled | failed. Terminal states absorb; exactly one terminal event, last.
`evolve` is strict: it refuses any event that could not have been produced by the commands
(a gap in positions, a delta for an item that is not open, a snapshot that differs from the
fold), so replaying a corrupted log fails loudly at the offending position.
"""

from __future__ import annotations

from collections.abc import Iterable

from domain.errors import NotFound
from domain.events import AnyEvent, Event, ResponseInProgress, ResponseQueued, tag_of
from domain.fold import builtins, calls, items, lifecycle, mcp, parts, summaries
from domain.fold.shared import Handler, fail
from domain.objects import ResponseObject
from domain.state import ResponseState


def evolve(state: ResponseState, event: AnyEvent) -> ResponseState:
    """Fold one event into the state; refuses anything the lifecycle does not allow."""
    _check_position(state, event)
    handler = _HANDLERS.get(type(event))
    if handler is None:  # pragma: no cover - the union is closed
        raise fail(state, event, "unknown event")
    return handler(state, event)


def replay(events: Iterable[AnyEvent], state: ResponseState | None = None) -> ResponseState:
    """Fold a stream (or the rest of one) into its state."""
    state = state or ResponseState()
    for event in events:
        state = evolve(state, event)
    return state


def project(state: ResponseState) -> ResponseObject:
    """The OpenAI Response object that the state stands for."""
    if state.response is None:
        raise NotFound("the stream holds no response")
    return state.response


def _check_position(state: ResponseState, event: AnyEvent) -> None:
    if event.sequence_number != state.version + 1:
        raise fail(state, event, f"expected position {state.version + 1}")
    if event.sequence_number == 1 and state.response is not None:
        # What follows `response.created` is fixed: `queued` (background) or `in_progress`.
        second = ResponseQueued if state.response.background else ResponseInProgress
        if not isinstance(event, second):
            raise fail(state, event, f"response.created must be followed by {tag_of(second)}")


# A table rather than one `match`, so that each handler is typed for its own event class
# and each family's rules read on their own (each family's module lists the events it folds).
_HANDLERS: dict[type[Event], Handler] = {
    **lifecycle.HANDLERS,
    **items.HANDLERS,
    **parts.HANDLERS,
    **summaries.HANDLERS,
    **calls.HANDLERS,
    **mcp.HANDLERS,
    **builtins.HANDLERS,
}
