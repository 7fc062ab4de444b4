"""The response aggregate's state: what the fold keeps of one response's log (`ResponseState`),
and what a command hands back (`Decision`)."""

from __future__ import annotations

import msgspec

from domain.events import AnyEvent, ReasoningEvents, RequestFacts, ToolFacts
from domain.objects import TERMINAL_STATUSES, ResponseObject


class ResponseState(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the commands need to know about one response, folded from its log."""

    version: int = -1  # position of the last event; -1 before the first
    response: ResponseObject | None = None  # the projection: the OpenAI object so far
    facts: RequestFacts | None = None
    started: bool = False  # `response.in_progress` seen
    open_index: int | None = None  # the output item being streamed
    open_part: int | None = None  # its open content part
    open_summary: int | None = None  # its open summary part (reasoning items)
    # The open part's final text (or the open call's final arguments) was sent: no more
    # deltas, and the part (or call) must close next.
    closing: bool = False
    # The open `mcp_call`'s step once its arguments are done: "calling" (it was handed to
    # the MCP server: `response.mcp_call.in_progress`), "ended" (its result is recorded and
    # `output_item.done` must follow). None before: the call was never started.
    # (A built-in call's `searching`/`interpreting` and `completed` are the same steps.) A
    # call in flight that a takeover retries (its tool is idempotent) is "retried".
    mcp_step: str | None = None
    # What built-in tool calls were asked and answered, by item id: hidden facts of their
    # item events, which the model is shown and clients are not (domain/builtins.py).
    tool_facts: dict[str, ToolFacts] = msgspec.field(default_factory=dict)

    @property
    def status(self) -> str | None:
        return None if self.response is None else self.response.status

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def reasoning_events(self) -> ReasoningEvents:
        """How this response's reasoning events are named, as its creation recorded."""
        return "openai" if self.facts is None else self.facts.reasoning_events


class Decision(msgspec.Struct, frozen=True):
    """The events a command produced and the state after them.

    The state comes back with the events so that the writer does not fold them a second
    time on the per-token path.
    """

    events: list[AnyEvent]
    state: ResponseState
