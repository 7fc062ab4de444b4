"""What an engine is asked to generate (`Prompt`) and what it yields (semantic deltas).

Every engine, whatever its protocol, speaks in these deltas; one pure builder
(`domain.builder.emit`) turns them into OpenAI stream events, so event shapes are the same
for every engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

import msgspec

from domain.objects import (
    CompactionItem,
    InputItem,
    McpListTools,
    OutputItem,
    ReasoningConfig,
    TextConfig,
    ToolChoice,
)
from domain.tools import OfferedTool


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One earlier response of the conversation: what was sent and what came back."""

    response_id: str
    instructions: str | None
    input: list[InputItem]
    output: list[OutputItem]
    # MCP tool lists in the turn's context that no model is shown: a conversation's, which
    # it keeps set aside (service/prompts/conversation.py `history_of`), or those an earlier
    # request's input passed back (set aside too: service/prompts/history.py). The tool loop
    # offers a listed server's tools from them (service/tools/mcploop.py `listed_before`).
    listed: list[McpListTools] = msgspec.field(default_factory=list)


_T = TypeVar("_T")


class History(list[Turn]):
    """A `previous_response_id` chain's turns, oldest first, made from the chain one turn
    shorter and one more turn (service/prompts/chains.py keeps them): what a stage of a
    create needs of all the turns (`running`) is carried from the shorter chain's by the new
    turn alone, not found by a walk of the whole chain. A plain list of the same turns is
    the same history; a history is never changed once made (nothing appends to one)."""

    __slots__ = ("_memo",)

    def __init__(self, parent: list[Turn], turn: Turn) -> None:
        super().__init__(parent)
        self.append(turn)
        self._memo: dict[str, tuple[Any, Callable[[Turn], Any], Callable[[Any, Any], Any]]] = {}
        if isinstance(parent, History):
            for key, (value, of_turn, add) in parent._memo.items():
                self._memo[key] = (add(value, of_turn(turn)), of_turn, add)

    def running(self, key: str, of_turn: Callable[[Turn], _T], add: Callable[[_T, _T], _T]) -> _T:
        """`add` folded over `of_turn` of every turn, oldest first, kept under `key` (the
        same functions for the same key, always): carried into every longer history made
        from this one, so only the first history asked walks its turns."""
        kept = self._memo.get(key)
        if kept is not None:
            return kept[0]  # type: ignore[no-any-return]
        value = of_turn(self[0])
        for turn in self[1:]:
            value = add(value, of_turn(turn))
        self._memo[key] = (value, of_turn, add)
        return value


def any_turn(history: list[Turn], key: str, test: Callable[[Turn], bool]) -> bool:
    """Whether `test` holds of a turn of `history`: kept as it grows (`History.running`),
    else asked of each turn."""
    if isinstance(history, History):
        return history.running(key, test, _either)
    return any(map(test, history))


def _either(a: bool, b: bool) -> bool:
    return a or b


class Compaction(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction made when the response was created, as its request's facts keep it
    (`extra.compaction`): `context_management`'s threshold was crossed, or the input ended
    with Codex's `compaction_trigger` (`only`: the compaction is the whole answer)."""

    item: CompactionItem
    summarized_by: str  # the response that wrote the summary
    only: bool = False
    kept_items: int = 0  # the request's trailing input items the engine still gets
    usage: TokenUsage = msgspec.field(default_factory=lambda: TokenUsage())
    input_tokens: int | None = None  # the count that crossed the threshold
    threshold: int | None = None


# The `include` value that asks for the answer's token log probabilities.
LOGPROBS = "message.output_text.logprobs"


class Prompt(msgspec.Struct, frozen=True, kw_only=True):
    """A stored request, resolved against its conversation, ready for an engine to render."""

    response_id: str
    model: str
    instructions: str | None
    history: list[Turn]  # oldest first; the chain of `previous_response_id`
    input: list[InputItem]
    tools: list[OfferedTool]  # what the model is told about (domain.tools.offered)
    tool_choice: ToolChoice
    parallel_tool_calls: bool
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    reasoning: ReasoningConfig
    text: TextConfig
    metadata: dict[str, str] = msgspec.field(default_factory=dict)
    include: list[str] = msgspec.field(default_factory=list)  # the request's `include`
    top_logprobs: int = 0  # alternatives per token, when `include` asks for logprobs
    presence_penalty: float = 0.0  # the request's (Open Responses); 0 leaves sampling as is
    frequency_penalty: float = 0.0
    # Hints for an upstream that uses them (an OpenAI-compatible chat API): the request's
    # `prompt_cache_key`, `safety_identifier`, and `service_tier` unless the default.
    hints: dict[str, str] = msgspec.field(default_factory=dict)
    # The compaction made at create, whose item opens the output (service/prompts/compaction.py).
    compaction: Compaction | None = None

    @property
    def wants_logprobs(self) -> bool:
        return LOGPROBS in self.include


# --- semantic deltas --------------------------------------------------------------------------


class Delta(msgspec.Struct, frozen=True, kw_only=True):
    """Base of what an engine yields."""


class ReasoningDelta(Delta, frozen=True, kw_only=True):
    """Chain-of-thought text (harmony's `analysis` channel, chat `reasoning_content`)."""

    text: str


class SummaryDelta(Delta, frozen=True, kw_only=True):
    """Reasoning summary text."""

    text: str


class TextDelta(Delta, frozen=True, kw_only=True):
    """Assistant message text; `commentary` is a preamble said before tool calls.

    `logprobs`: one entry per token of `text` when the request asked for them (`include`
    `message.output_text.logprobs`), in the shape of openai-python's `Logprob` of
    `ResponseOutputText` (`token`, `bytes`, `logprob`, `top_logprobs`), which the Open
    Responses schema's `LogProb` requires of the events too."""

    text: str
    phase: Literal["commentary", "final_answer"] | None = None
    logprobs: list[dict[str, Any]] = msgspec.field(default_factory=list)


class RefusalDelta(Delta, frozen=True, kw_only=True):
    text: str


class FunctionCallStart(Delta, frozen=True, kw_only=True):
    """The model starts calling tool `name` (in `namespace`, if the tool is in one);
    arguments follow as `ArgumentsDelta`, or for a `custom` tool its text as `InputDelta`."""

    name: str
    call_id: str | None = None  # the engine's id if it has one; else one is derived
    namespace: str | None = None
    custom: bool = False
    # The MCP server whose tool this is (service/tools/calls.py names it): an `mcp_call`;
    # `approval`: its calls wait for the client (an `mcp_approval_request` instead).
    server_label: str | None = None
    approval: bool = False
    builtin: str | None = None  # gpt-oss's `browser` or `python` (domain/builtins.py)


class BrowserCall(Delta, frozen=True, kw_only=True):
    """The model called gpt-oss's built-in browser (`browser.search`, `.open`, `.find`):
    the whole call, which becomes a `web_search_call` (an item OpenAI adds whole)."""

    name: str
    arguments: str


class ApprovalRequest(Delta, frozen=True, kw_only=True):
    """The model called an MCP tool whose calls wait for the client's approval
    (`require_approval`): the whole call, which becomes an `mcp_approval_request`."""

    server_label: str
    name: str
    arguments: str


class InputDelta(Delta, frozen=True, kw_only=True):
    """Text of a custom tool call's input."""

    text: str


class ArgumentsDelta(Delta, frozen=True, kw_only=True):
    text: str


class ReasoningSealed(Delta, frozen=True, kw_only=True):
    """The open reasoning item is complete, and carries its content sealed for a client
    that keeps no state (service/reasoning/sealing.py)."""

    encrypted_content: str


class Compacted(Delta, frozen=True, kw_only=True):
    """The conversation was compacted before generation: the compaction output item."""

    item: CompactionItem


class EndItem(Delta, frozen=True, kw_only=True):
    """The current output item is complete (a message, a reasoning block, a call)."""


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True):
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


FinishReason = Literal["stop", "length", "content_filter"]


class Finished(Delta, frozen=True, kw_only=True):
    """The engine is done; nothing follows. `length` means the token budget ran out."""

    reason: FinishReason
    usage: TokenUsage


AnyDelta = (
    Compacted
    | ReasoningDelta
    | SummaryDelta
    | TextDelta
    | RefusalDelta
    | FunctionCallStart
    | ArgumentsDelta
    | InputDelta
    | ReasoningSealed
    | EndItem
    | Finished
    | ApprovalRequest
    | BrowserCall
)
