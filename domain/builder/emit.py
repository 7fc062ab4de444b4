"""The event builder's entry: `emit` turns one semantic delta of an engine into OpenAI
stream events, by the builder of the delta's family (`text`, `calls`, `items`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from domain.batch import Batch, require
from domain.builder import calls, items, text
from domain.errors import InvalidTransition
from domain.generation import AnyDelta, Finished
from domain.state import Decision, ResponseState


def emit(state: ResponseState, delta: AnyDelta) -> Decision:
    """Turn one semantic delta of an engine into OpenAI stream events."""
    resp = require(state, "in_progress")
    if not state.started:
        raise InvalidTransition(f"response {resp.id} has not started")
    if isinstance(delta, Finished):
        raise InvalidTransition("Finished is not a content delta; use finish()")
    batch = Batch(state)
    _BUILDERS[type(delta)](batch, delta)
    return batch.decision()


# A table rather than one `match`, so that each builder is typed for its own delta class.
# `Finished` has none: `emit` refuses it, `finish` handles it.
_BUILDERS: dict[type[AnyDelta], Callable[[Batch, Any], None]] = {
    **text.BUILDERS,
    **calls.BUILDERS,
    **items.BUILDERS,
}
