"""How a command makes its events: each one is folded by `evolve` as it is made, so a command
can only ever produce events that `evolve` accepts (`Batch`), and the guard on a response's
status that every command starts with (`require`)."""

from __future__ import annotations

from collections.abc import Callable

from domain.errors import InvalidTransition, NotFound
from domain.events import AnyEvent
from domain.fold.replay import evolve
from domain.objects import ResponseObject
from domain.state import Decision, ResponseState


class Batch:
    """Collects a command's events, folding each one as it is made (local, not shared)."""

    def __init__(self, state: ResponseState) -> None:
        self.state = state
        self.events: list[AnyEvent] = []

    def add(self, make: Callable[[int], AnyEvent]) -> None:
        """Make the next event at its position (`make` gets the sequence number)."""
        event = make(self.state.version + 1)
        self.state = evolve(self.state, event)
        self.events.append(event)

    def decision(self) -> Decision:
        return Decision(self.events, self.state)

    @property
    def response(self) -> ResponseObject:
        assert self.state.response is not None
        return self.state.response


def require(state: ResponseState, *allowed: str) -> ResponseObject:
    """The response, if its status is one of `allowed`; else the command is refused."""
    if state.response is None:
        raise NotFound("no such response")
    if state.response.status not in allowed:
        raise InvalidTransition(
            f"response {state.response.id} is {state.response.status}; "
            f"this needs it {' or '.join(allowed)}"
        )
    return state.response
