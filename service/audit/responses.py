"""Responses for an auditor, any owner's: the read model's rows a page at a time (`resplog
responses list`, the audit view's list), and one response as its log tells it (`responses
show`, the view's page of one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from domain.events import AnyEvent
from service.audit.conversation import TurnView
from service.audit.reading import replay, response_turns
from service.audit.timeline import Replay, summary
from service.ports import ResponsePage, ResponseRow, StoredEvent

if TYPE_CHECKING:  # the bundle (and the runner it holds) is not imported by `--help`
    from service.bundle import Audit


async def list_responses(audit: Audit, **filters: Any) -> ResponsePage:
    """Rows newest first, filtered as `LogReader.page` filters them."""
    return await audit.log.page(**filters)


async def show_response(audit: Audit, rid: str) -> tuple[ResponseRow | None, Replay]:
    """The row and the fold of the response's log (`NotFound` if it has neither)."""
    return await replay(audit.log, rid)


class Noted(msgspec.Struct, frozen=True, kw_only=True):
    """One event of a timeline: where, what, when it was recorded, and in a line."""

    position: int
    type: str
    at: float
    summary: str


class Detail(msgspec.Struct, frozen=True, kw_only=True):
    """A response as the audit view's page of one shows it."""

    record: ResponseRow | None
    folded: Replay
    turns: list[TurnView]
    missing: str | None  # an earlier turn that is gone
    events: list[Noted]


async def response_detail(audit: Audit, rid: str) -> Detail:
    """Its row, the fold of its log with every event noted, and the turns that lead to it."""
    events: list[Noted] = []

    def note(stored: StoredEvent, event: AnyEvent) -> None:
        events.append(
            Noted(
                position=stored.position,
                type=stored.type,
                at=stored.recorded_at,
                summary=summary(event),
            )
        )

    record, folded = await replay(audit.log, rid, note)
    turns, missing = await response_turns(audit.log, rid)
    return Detail(record=record, folded=folded, turns=turns, missing=missing, events=events)
