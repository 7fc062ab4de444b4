"""Reading one response's log for the audit tools (the `show` and `conversation` commands,
the `/audit` web view): its row and the fold of its events, and the turns that lead to it,
through the `LogReader` port."""

from __future__ import annotations

from collections.abc import Callable

from domain.errors import CorruptEvent, InvalidTransition, NotFound, ResplogError
from domain.events import AnyEvent
from service.audit.conversation import TurnView, turn_view
from service.audit.timeline import Replay
from service.ports import LogReader, ResponseRow, StoredEvent

MAX_TURNS = 1000


async def replay(
    scan: LogReader,
    rid: str,
    each: Callable[[StoredEvent, AnyEvent], None] | None = None,
) -> tuple[ResponseRow | None, Replay]:
    """The row and the fold of one response's log (`each` sees every event as it is
    folded); a damaged log is one line naming it."""
    record = await scan.record(rid)
    folded = Replay()
    try:
        async for stored in scan.events(rid):
            event = folded.feed(stored)
            if each is not None:
                each(stored, event)
    except (InvalidTransition, CorruptEvent) as exc:
        raise ResplogError(f"{exc} (the log is damaged: see resplog verify {rid})") from None
    if record is None and folded.events == 0:
        raise NotFound(f"no response {rid} in this database")
    return record, folded


async def response_turns(scan: LogReader, rid: str) -> tuple[list[TurnView], str | None]:
    """The turns that lead to `rid` (walking `previous_response_id`), oldest first, and the
    id of an earlier turn that is gone (if one is)."""
    turns: list[TurnView] = []
    seen: set[str] = set()
    current: str | None = rid
    while current is not None:
        if current in seen or len(turns) >= MAX_TURNS:
            raise ResplogError(
                f"{rid}: the previous_response_id chain loops or exceeds {MAX_TURNS}"
            )
        seen.add(current)
        try:
            record, folded = await replay(scan, current)
        except NotFound:
            if current == rid:
                raise
            turns.reverse()
            return turns, current
        if folded.request is None:
            raise ResplogError(f"{current}: the log does not start with its request")
        response = folded.response
        deleted_at = record.deleted_at if record is not None else None
        turns.append(turn_view(folded.request, response, folded.end, deleted_at))
        current = response.previous_response_id
    turns.reverse()
    return turns, None
