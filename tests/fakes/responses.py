"""Feed an engine's deltas through the one event builder and check what comes out is a
well-formed OpenAI response (validated by the official `openai` package's model)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from openai.types.responses import Response

from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import create
from domain.events import AnyEvent, RequestFacts
from domain.fold.replay import project, replay
from domain.generation import AnyDelta, Finished
from domain.objects import ResponseObject


def build(deltas: Sequence[AnyDelta], model: str = "gpt-oss-120b") -> ResponseObject:
    """The response the deltas make; asserts they end in exactly one `Finished`."""
    *content, last = deltas
    assert isinstance(last, Finished), f"the last delta is {last!r}, not Finished"
    assert not any(isinstance(d, Finished) for d in content), "Finished before the end"
    created = ResponseObject(id="resp_engine_test", created_at=0, status="in_progress", model=model)
    decision = create(created, RequestFacts(owner="test", input=[]))
    events: list[AnyEvent] = list(decision.events)
    state = decision.state
    for delta in content:
        step = emit(state, delta)
        events += step.events
        state = step.state
    end = finish(state, last, now=1)
    events += end.events
    assert replay(events) == end.state  # the log folds to what the builder built
    return project(end.state)


def validated(deltas: Sequence[AnyDelta], model: str = "gpt-oss-120b") -> Response:
    """`build`, then validated as `openai.types.responses.Response`."""
    return Response.model_validate(msgspec.to_builtins(build(deltas, model)))
