"""Render a `Prompt` into the prompt token ids gpt-oss expects, with openai-harmony.

The conversation is: a system message (identity, knowledge cutoff, date, reasoning effort,
valid channels), a developer message (instructions, function tools, response format), then
the history turns and the current input, each item as the harmony message gpt-oss wrote or
reads, and finally `<|start|>assistant` for the model to continue.
"""

from __future__ import annotations

import json
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime
from typing import Any

import msgspec
from openai_harmony import (
    Author,
    Conversation,
    DeveloperContent,
    Message,
    ReasoningEffort,
    RenderConversationConfig,
    RenderOptions,
    Role,
    SystemContent,
    TextContent,
    ToolDescription,
    ToolNamespaceConfig,
)

from adapters.engines.harmony.encoding import gpt_oss_encoding, special_token, stop_token_ids
from domain.errors import EngineError
from domain.generation import Prompt
from domain.objects import (
    FormatJsonObject,
    FormatJsonSchema,
    FunctionCall,
    FunctionCallOutput,
    InputFunctionCall,
    InputItem,
    InputMessage,
    InputReasoning,
    OutputItem,
    OutputMessage,
    ReasoningItem,
    Refusal,
    phase_of,
)
from domain.tools import OfferedTool, function_view, narrowed

DEFAULT_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
DEFAULT_CUTOFF = "2024-06"

_EFFORT = {
    "none": ReasoningEffort.LOW,
    "minimal": ReasoningEffort.LOW,
    "low": ReasoningEffort.LOW,
    "medium": ReasoningEffort.MEDIUM,
    "high": ReasoningEffort.HIGH,
    "xhigh": ReasoningEffort.HIGH,
    "max": ReasoningEffort.HIGH,
}
# The content type gpt-oss writes on a function call, and must read back on one.
JSON_CONTENT_TYPE = "<|constrain|>json"


def _utc_today() -> date:
    return datetime.now(UTC).date()


def _invalid(message: str) -> EngineError:
    return EngineError(message, code="invalid_prompt")


class HarmonyRenderer:
    """Turns prompts into gpt-oss prompt token ids; one per engine, safe to share."""

    def __init__(
        self,
        encoding: Any | None = None,
        *,
        model_identity: str = DEFAULT_IDENTITY,
        knowledge_cutoff: str = DEFAULT_CUTOFF,
        today: Callable[[], date] = _utc_today,
    ) -> None:
        self.encoding = encoding if encoding is not None else gpt_oss_encoding()
        self.model_identity = model_identity
        self.knowledge_cutoff = knowledge_cutoff
        self.today = today
        self.stop_token_ids = stop_token_ids(self.encoding)
        self._rendered = RenderedMessages(self.encoding)

    def conversation(self, prompt: Prompt) -> Conversation:
        """The harmony conversation of `prompt`, earlier chain-of-thought already dropped."""
        head = [self._system(prompt)]
        developer = _developer(prompt)
        if developer is not None:
            head.append(developer)
        body = _body(prompt)
        # `reasoning.context: "all_turns"` shows the model every turn's reasoning; otherwise
        # (`current_turn`, `auto`, unset) gpt-oss's own rule applies.
        if prompt.reasoning.context != "all_turns":
            body = drop_spent_reasoning(body)
        return Conversation.from_messages(head + body)

    def render(self, prompt: Prompt) -> list[int]:
        """Prompt token ids, ending in `<|start|>assistant`: what harmony's
        `render_conversation_for_completion` gives for `conversation(prompt)`, message by
        message (`RenderedMessages`)."""
        # Dropping is done by `drop_spent_reasoning`, whose rule is gpt-oss's; harmony's own
        # auto-drop (off here) only looks at the analysis before the *first* final message.
        return self._rendered.conversation(self.conversation(prompt).messages)

    def _system(self, prompt: Prompt) -> Message:
        effort = _EFFORT.get(prompt.reasoning.effort or "medium", ReasoningEffort.MEDIUM)
        content = (
            SystemContent.new()
            .with_model_identity(self.model_identity)
            .with_reasoning_effort(effort)
            .with_knowledge_cutoff(self.knowledge_cutoff)
            .with_conversation_start_date(self.today().isoformat())
            .with_required_channels(["analysis", "commentary", "final"])
        )
        # gpt-oss's built-ins are announced in the system message, in harmony's own words
        # (openai-harmony's `with_browser_tool`/`with_python_tool`), not as functions.
        kinds = {t.builtin for t in announced_tools(prompt)}
        if "browser" in kinds:
            content = content.with_browser_tool()
        if "python" in kinds:
            content = content.with_python_tool()
        return Message.from_role_and_content(Role.SYSTEM, content)


# --- rendering, message by message ------------------------------------------------------

# What the cache of rendered messages may hold, in bytes (each message's JSON and 4 bytes a
# token id); a message larger than a sixteenth of it is rendered each time instead.
RENDERED_BYTES = 32 * 1024 * 1024


class RenderedMessages:
    """A conversation's token ids, rendered a message at a time by harmony and kept.

    Why: openai-harmony encodes every formatting token of a message (`<|start|>`,
    `<|channel|>`, `<|message|>`, `<|end|>`) by building the set of its thousand special
    tokens again, so a message costs 80-120 µs to render however short it is, and a prompt
    of a system and a user message 230 µs (docs/performance.md, "The harmony rendering and
    parser"). Harmony renders a conversation as its messages' renderings one after another,
    each given one fact about the whole (whether a developer message declares function tools),
    then `<|start|>` and the next role (openai-harmony's `render_conversation_into`, with
    `auto_drop_analysis` off as here). So each message is rendered once for the JSON
    harmony is given and that fact, and kept: the system message is the same for every
    request of a day and effort, an agent's developer message recurs every turn, and so
    does a conversation's history. A user's plain text message, the one item that is new
    in most requests, is put together here from the formatting tokens' ids and its text's
    ordinary tokens, as harmony renders it (checked against harmony in the tests).
    """

    def __init__(self, encoding: Any, limit: int = RENDERED_BYTES) -> None:
        self.encoding = encoding
        self._limit = limit
        self._kept: OrderedDict[tuple[bool, str], array[int]] = OrderedDict()
        self._size = 0
        empty = Conversation.from_messages([])
        config = RenderConversationConfig(auto_drop_analysis=False)
        self._next = list(
            encoding.render_conversation_for_completion(empty, Role.ASSISTANT, config)
        )
        start, message, end = (
            special_token(encoding, t) for t in ("<|start|>", "<|message|>", "<|end|>")
        )
        self._user_head = [start, *self._ordinary(Role.USER.value), message]
        self._end = end

    def conversation(self, messages: list[Message]) -> list[int]:
        """The ids of `messages`, then `<|start|>assistant`."""
        options = RenderOptions(conversation_has_function_tools=_declares_functions(messages))
        ids: list[int] = []
        for message in messages:
            text = _plain_user_text(message)
            if text is not None:
                ids += self._user_head
                ids += self._ordinary(text)
                ids.append(self._end)
            else:
                ids += self._message(message, options)
        ids += self._next
        return ids

    def _ordinary(self, text: str) -> list[int]:
        """`text` as ordinary tokens: what looks like a special token is text (as harmony's
        `encode_ordinary` reads a message's text)."""
        return list(self.encoding.encode(text, disallowed_special=()))

    def _message(self, message: Message, options: RenderOptions) -> array[int] | list[int]:
        key = (options.conversation_has_function_tools, message.to_json())
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        ids = array("I", self.encoding.render(message, options))
        size = len(key[1]) + 4 * len(ids)
        if size * 16 > self._limit:
            return ids
        self._kept[key] = ids
        self._size += size
        while self._size > self._limit:
            (_, json_text), old = self._kept.popitem(last=False)
            self._size -= len(json_text) + 4 * len(old)
        return ids


def _declares_functions(messages: list[Message]) -> bool:
    """Whether a developer message declares function tools: harmony's one fact about a
    whole conversation that a message's rendering reads (its system message then says
    where calls go)."""
    for message in messages:
        for content in message.content:
            if isinstance(content, DeveloperContent) and content.tools:
                functions = content.tools.get("functions")
                if functions is not None and functions.tools:
                    return True
    return False


def _plain_user_text(message: Message) -> str | None:
    """The text of a user message that is nothing but one text (no name, channel,
    recipient or content type), whose rendering is `<|start|>user<|message|>TEXT<|end|>`."""
    if (
        message.author.role != Role.USER
        or message.author.name is not None
        or message.channel is not None
        or message.recipient is not None
        or message.content_type is not None
        or len(message.content) != 1
    ):
        return None
    (content,) = message.content
    return content.text if type(content) is TextContent else None


# --- developer message ------------------------------------------------------------------


def announced_tools(prompt: Prompt) -> list[OfferedTool]:
    """The tools the model is told about; `tool_choice` narrows them (harmony has no way to
    force a call, so "required" announces them all)."""
    if prompt.tool_choice == "none":
        return []
    return narrowed(prompt.tools, prompt.tool_choice)


def _namespaces(tools: list[OfferedTool]) -> list[ToolNamespaceConfig]:
    """Plain tools in harmony's `functions` namespace, namespaced ones in their own (the
    model calls them `namespace.name`); a custom tool is a function of one string."""
    spaces: dict[str, ToolNamespaceConfig] = {}
    for t in tools:
        if t.builtin is not None:
            continue  # in the system message (`HarmonyRenderer._system`)
        name = t.namespace or "functions"
        about = t.namespace_description if t.namespace else None
        space = spaces.setdefault(name, ToolNamespaceConfig(name=name, description=about, tools=[]))
        space.tools.append(ToolDescription.new(t.name, t.description or "", t.parameters))
    return list(spaces.values())


def _recipient(name: str) -> str:
    """A qualified name (`namespace.name`, from `function_view`) is its own recipient."""
    return name if "." in name else f"functions.{name}"


def _response_format(prompt: Prompt) -> str | None:
    """The `# Response Formats` section gpt-oss reads for structured output."""
    fmt = prompt.text.format
    if isinstance(fmt, FormatJsonSchema):
        lines = ["# Response Formats", "", f"## {fmt.name}", ""]
        if fmt.description:
            lines.append(f"// {fmt.description}")
        lines.append(json.dumps(fmt.schema, separators=(",", ":")))
        return "\n".join(lines)
    if isinstance(fmt, FormatJsonObject):
        return "# Response Formats\n\nRespond with a single JSON object."
    return None


def _developer(prompt: Prompt) -> Message | None:
    sections = [s for s in (prompt.instructions, _response_format(prompt)) if s]
    tools = [t for t in announced_tools(prompt) if t.builtin is None]
    if not sections and not tools:
        return None
    content = DeveloperContent.new()
    if sections:
        content = content.with_instructions("\n\n".join(sections))
    for space in _namespaces(tools):
        content = content.with_tools(space)
    return Message.from_role_and_content(Role.DEVELOPER, content)


# --- conversation items -----------------------------------------------------------------


def _items(prompt: Prompt) -> list[InputItem | OutputItem]:
    """Every item of the conversation in order; earlier turns' instructions are not carried
    over (as in OpenAI's API)."""
    items: list[InputItem | OutputItem] = []
    for turn in prompt.history:
        items.extend(turn.input)
        items.extend(turn.output)
    items.extend(prompt.input)
    return items


def _call_names(items: Iterable[InputItem | OutputItem]) -> dict[str, str]:
    views = (function_view(i, ".") for i in items)
    return {v.call_id: v.name for v in views if isinstance(v, InputFunctionCall | FunctionCall)}


def _body(prompt: Prompt) -> list[Message]:
    items = _items(prompt)
    names = _call_names(items)
    builtins = {t.qualified(".") for t in prompt.tools if t.builtin is not None}
    return [m for item in items for m in _messages(item, names, builtins)]


def _text(parts: Iterable[object]) -> str:
    out = []
    for p in parts:
        if isinstance(p, Refusal):
            out.append(p.refusal)
        elif hasattr(p, "text"):
            out.append(p.text)
    return "".join(out)


def _assistant(text: str, channel: str) -> Message:
    return Message.from_role_and_content(Role.ASSISTANT, text).with_channel(channel)


def _call(name: str, arguments: str) -> Message:
    return (
        Message.from_role_and_content(Role.ASSISTANT, arguments)
        .with_channel("commentary")
        .with_recipient(_recipient(name))
        .with_content_type(JSON_CONTENT_TYPE)
    )


def _builtin_call(name: str, arguments: str) -> Message:
    """A call of a built-in (`browser.search`, `python`), as gpt-oss writes one: from its
    analysis, the arguments (or the code) as `code`."""
    return (
        Message.from_role_and_content(Role.ASSISTANT, arguments)
        .with_channel("analysis")
        .with_recipient(name)
        .with_content_type("code")
    )


def _tool_result(item: FunctionCallOutput, names: dict[str, str], builtins: set[str]) -> Message:
    name = names.get(item.call_id)
    if name is None:
        raise _invalid(
            f"function_call_output {item.id} answers call_id {item.call_id!r}, "
            "but no function_call with that call_id is in the conversation"
        )
    builtin = name in builtins
    author = Author.new(Role.TOOL, name if builtin else _recipient(name))
    return (
        Message.from_author_and_content(author, item.output)
        .with_channel("analysis" if builtin else "commentary")
        .with_recipient("assistant")
    )


def _input_message(item: InputMessage) -> list[Message]:
    text = _text(item.content)
    if item.role == "user":
        return [Message.from_role_and_contents(Role.USER, [TextContent(text=text)])]
    if item.role == "assistant":
        # A passed-back preamble goes back on the channel the model said it on.
        channel = "commentary" if phase_of(item) == "commentary" else "final"
        return [_assistant(text, channel)] if text else []
    # A system or developer message inside the input is an instruction; the harmony
    # system message is reserved for the model's own configuration.
    content = DeveloperContent.new().with_instructions(text)
    return [Message.from_role_and_content(Role.DEVELOPER, content)]


def _reasoning(item: InputReasoning | ReasoningItem) -> list[Message]:
    text = _text(item.content)
    return [_assistant(text, "analysis")] if text else []


def _messages(
    original: InputItem | OutputItem, names: dict[str, str], builtins: set[str]
) -> list[Message]:
    item = function_view(original, ".")
    match item:
        case InputMessage():
            return _input_message(item)
        case OutputMessage(content=content, phase=phase):
            text = _text(content)
            channel = "commentary" if phase == "commentary" else "final"
            return [_assistant(text, channel)] if text else []
        case InputReasoning() | ReasoningItem():
            return _reasoning(item)
        case (
            InputFunctionCall(name=name, arguments=arguments)
            | FunctionCall(name=name, arguments=arguments)
        ):
            return [_builtin_call(name, arguments) if name in builtins else _call(name, arguments)]
        case FunctionCallOutput():
            return [_tool_result(item, names, builtins)]
    raise _invalid(f"cannot render input item {msgspec.to_builtins(item)!r}")


def drop_spent_reasoning(messages: list[Message]) -> list[Message]:
    """gpt-oss's rule for continuing a conversation: chain-of-thought of turns that ended in
    a final answer is dropped; the reasoning after the last final answer (a tool-calling
    turn still in progress) is kept, so the model picks up where it left off."""
    last_final = max(
        (
            i
            for i, m in enumerate(messages)
            if m.author.role == Role.ASSISTANT and m.channel == "final"
        ),
        default=-1,
    )
    return [m for i, m in enumerate(messages) if not (i < last_final and m.channel == "analysis")]
