"""Realistic response streams for the store tests, made by the real aggregate."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Iterator
from typing import Literal

from domain.builder.emit import emit
from domain.builder.finish import finish
from domain.commands import cancel, create, fail, start
from domain.events import AnyEvent, RequestFacts
from domain.generation import (
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    InputDelta,
    ReasoningDelta,
    RefusalDelta,
    SummaryDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import InputMessage, InputText, ResponseObject
from domain.state import Decision, ResponseState

Append = tuple[int, list[AnyEvent]]  # (expected_version, events)
End = Literal["completed", "incomplete", "failed", "cancelled", "open"]

_clock = itertools.count(int(time.time()))


def new_id() -> str:
    return f"resp_{secrets.token_hex(12)}"


def created(
    rid: str | None = None,
    *,
    owner: str = "owner_a",
    model: str = "test-model",
    background: bool = False,
    store: bool = True,
    previous: str | None = None,
    created_at: int | None = None,
) -> Decision:
    """`create()` of a fresh response (status queued if background, else in_progress)."""
    rid = rid or new_id()
    response = ResponseObject(
        id=rid,
        created_at=next(_clock) if created_at is None else created_at,
        status="queued" if background else "in_progress",
        model=model,
        background=background,
        store=store,
        previous_response_id=previous,
    )
    question = InputMessage(id=f"msg_{rid}", role="user", content=[InputText(text="Hi ✓")])
    return create(response, RequestFacts(owner=owner, input=[question]))


def script(
    rid: str | None = None,
    *,
    deltas: int = 5,
    end: End = "completed",
    background: bool = False,
    **kwargs: object,
) -> list[Append]:
    """The appends of one response: created, `deltas` text deltas (one append each), end."""
    return list(appends(rid, deltas=deltas, end=end, background=background, **kwargs))


def appends(
    rid: str | None = None,
    *,
    deltas: int = 5,
    end: End = "completed",
    background: bool = False,
    **kwargs: object,
) -> Iterator[Append]:
    decision = created(rid, background=background, **kwargs)  # type: ignore[arg-type]
    yield -1, decision.events
    state = decision.state
    if background:
        decision = start(state)
        yield state.version, decision.events
        state = decision.state
    for i in range(deltas):
        decision = emit(state, TextDelta(text=f"tok{i} é "))
        yield state.version, decision.events
        state = decision.state
    if end == "open":
        return
    yield state.version, _end(state, end).events


def _end(state: ResponseState, end: End) -> Decision:
    usage = TokenUsage(input_tokens=3, output_tokens=5)
    if end == "completed":
        return finish(state, Finished(reason="stop", usage=usage), now=next(_clock))
    if end == "incomplete":
        return finish(state, Finished(reason="length", usage=usage), now=next(_clock))
    if end == "failed":
        return fail(state, code="server_error", message="boom", reason="engine", detail="x")
    return cancel(state, reason="user")


def events_of(appends_: list[Append]) -> list[AnyEvent]:
    return [e for _, batch in appends_ for e in batch]


def every_tag_script(rid: str | None = None) -> list[Append]:
    """One response whose log holds every tag but the other three terminal ones."""
    decision = created(rid)
    out: list[Append] = [(-1, decision.events)]
    state = decision.state
    for delta in (
        ReasoningDelta(text="think"),
        SummaryDelta(text="sum"),
        EndItem(),
        TextDelta(text="hello", phase="final_answer"),
        RefusalDelta(text="no"),
        EndItem(),
        FunctionCallStart(name="get_weather", call_id="call_1"),
        ArgumentsDelta(text='{"city":'),
        ArgumentsDelta(text='"Paris"}'),
        EndItem(),
        FunctionCallStart(name="apply_patch", namespace="edit", custom=True),
        InputDelta(text="*** Begin Patch"),
        EndItem(),
    ):
        decision = emit(state, delta)
        out.append((state.version, decision.events))
        state = decision.state
    decision = finish(state, Finished(reason="stop", usage=TokenUsage()), now=next(_clock))
    out.append((state.version, decision.events))
    return out
