"""WebSocket mode: the use-case behind one connection to `/v1/responses` (docs/websocket.md).

Each `response.create` message is the create of `POST /v1/responses` with `stream: true`
(`service.responses.modes`), and what the client receives is that response's log, tailed from
its first event, so the socket shows exactly what a later replay shows. What a connection
adds is OpenAI's connection-local cache: each lane remembers its last response (with the
conversation it ends), and a `previous_response_id` naming a remembered response is
continued from memory instead of reading the chain from the log. That is what lets a
`store: false` response be continued at all (the log's chain walk never crosses one: a
response that was not stored is invisible to every read), and it saves a query per turn.

The cache is in this process's memory only: it dies with the connection (a reconnect starts
empty, even on the same replica), and a turn that fails empties its lane's entry, so a
client never continues a conversation whose last turn it did not see complete.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import msgspec

from domain.errors import InvalidRequest, NotFound
from domain.events import ResponseCompleted, ResponseIncomplete
from domain.generation import History, Turn
from domain.state import ResponseState
from service.bundle import Bundle
from service.ports import Batches, StoredEvent
from service.prompts.history import MAX_CHAIN, load_history, too_long
from service.responses.modes import create_tailed, tail_new
from service.tools.mcploop import passed_back
from service.wire.create_request import CreateRequest

Lane = str | None  # a `stream_id`; None is the lane of messages that name none


# What one connection may hold in its cache, all lanes together (the stored JSON of the
# requests and final objects it remembers): a client must not pin unbounded memory.
MAX_REMEMBERED_BYTES = 64 * 1024 * 1024


class Remembered(msgspec.Struct, frozen=True):
    """A lane's last response and the conversation through it, oldest turn first, and
    the size of that conversation as stored (its requests' facts and final objects)."""

    response_id: str
    history: list[Turn]
    size: int


def previous_not_found(previous_id: str) -> InvalidRequest:
    """OpenAI's code for a `previous_response_id` that cannot be continued; the message
    says why a `store: false` one cannot be found after its connection or turn ended."""
    return InvalidRequest(
        f"Previous response with id '{previous_id}' not found. A response created with "
        "store=false is not kept: it can be continued only over the WebSocket connection "
        "that created it, while it is the last response of its lane (not after a "
        "reconnect, nor after a failed turn on that lane, nor once the conversation "
        "outgrew the connection's memory). Send the conversation as input instead.",
        param="previous_response_id",
        code="previous_response_not_found",
    )


class SocketSession:
    """One connection's owner and cache; `create` is its one use-case."""

    def __init__(self, svc: Bundle, owner: str, *, max_bytes: int = MAX_REMEMBERED_BYTES) -> None:
        self._svc, self._owner, self._max_bytes = svc, owner, max_bytes
        self._last: dict[Lane, Remembered] = {}

    def remembered(self, response_id: str) -> list[Turn] | None:
        """The conversation through `response_id` if some lane's last response is it."""
        entry = self._entry(response_id)
        return None if entry is None else entry.history

    def _entry(self, response_id: str) -> Remembered | None:
        for entry in self._last.values():
            if entry.response_id == response_id:
                return entry
        return None

    def forget(self, lane: Lane) -> None:
        self._last.pop(lane, None)

    def close(self) -> None:
        self._last.clear()

    async def create(self, lane: Lane, req: CreateRequest) -> AsyncGenerator[StoredEvent, None]:
        """Create the response and return its events from the log. The lane's cache then
        holds it if it ends completed or incomplete; a create that is refused, or a
        response that fails or is cancelled, empties the lane's cache."""
        try:
            before = await self._history(req.response.previous_response_id)
            started, tail = await create_tailed(self._svc, req, self._owner, history=before.history)
        except BaseException:
            self.forget(lane)
            raise
        return self._follow(lane, started.state, before, background=req.background, tail=tail)

    async def _history(self, previous_id: str | None) -> Remembered:
        """The conversation a create continues, from the cache or else from the log."""
        if previous_id is None:
            return Remembered("", [], 0)
        entry = self._entry(previous_id)
        if entry is None:
            try:
                history = await load_history(self._svc, previous_id, self._owner)
            except NotFound as exc:
                raise previous_not_found(previous_id) from exc
            return Remembered(previous_id, history, len(msgspec.json.encode(history)))
        if len(entry.history) >= MAX_CHAIN:
            raise too_long()
        return entry

    async def _follow(
        self,
        lane: Lane,
        state: ResponseState,
        before: Remembered,
        *,
        background: bool,
        tail: Batches,
    ) -> AsyncGenerator[StoredEvent, None]:
        assert state.response is not None and state.facts is not None
        rid = state.response.id
        end = None
        size = before.size
        batches = tail_new(self._svc, rid, background=background, tail=tail)
        async for batch in batches:
            for event in batch:
                if event.position == 0 or event.terminal:  # the request's facts; the end
                    size += len(event.data) + len(event.facts or b"")
                if event.terminal:
                    end = event.event()
                yield event
        self.forget(lane)
        others = sum(entry.size for entry in self._last.values())
        if isinstance(end, ResponseCompleted | ResponseIncomplete) and (
            others + size <= self._max_bytes
        ):
            turn = Turn(  # as service/prompts/history.py makes it from the log
                response_id=rid,
                instructions=end.response.instructions,
                input=state.facts.input,
                output=end.response.output,
                listed=passed_back(state.facts),
            )
            # Made from the history before it, so the stages of the lane's next create carry
            # what they need of every turn rather than walk them (domain/generation.py).
            self._last[lane] = Remembered(rid, History(before.history, turn), size)
