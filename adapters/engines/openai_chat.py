"""Any chat model behind an OpenAI-compatible `/v1/chat/completions` (sglang, vLLM, ...):
the prompt becomes chat messages and tools, the streamed content, reasoning and tool-call
deltas become semantic deltas. The upstream applies the chat template; closing the stream
is the abort (vLLM and sglang stop a request whose client went away).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from adapters.engines._http import (
    HttpEngine,
    Reading,
    Timeouts,
    deadline,
    preview,
    protocol_error,
    read_deltas,
    status_error,
)
from adapters.engines.files import file_text
from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FinishReason,
    FunctionCallStart,
    Prompt,
    ReasoningDelta,
    RefusalDelta,
    TextDelta,
    TokenUsage,
)
from domain.objects import (
    AllowedToolsChoice,
    CustomToolChoice,
    FormatJsonObject,
    FormatJsonSchema,
    FunctionCall,
    FunctionCallOutput,
    FunctionToolChoice,
    HostedToolChoice,
    InputFile,
    InputFunctionCall,
    InputImage,
    InputItem,
    InputMessage,
    InputReasoning,
    McpToolChoice,
    OutputItem,
    OutputMessage,
    ReasoningItem,
    Refusal,
)
from domain.tools import OfferedTool, function_view, narrowed

log = logging.getLogger(__name__)

# A namespaced tool's function name here: chat function names may not hold a dot.
SEPARATOR = "__"

# --- prompt -> chat request -------------------------------------------------------------


def _text(parts: list[Any]) -> str:
    return "".join(
        p.refusal if isinstance(p, Refusal) else p.text
        for p in parts
        if not isinstance(p, InputImage | InputFile)
    )


def _content(parts: list[Any]) -> str | list[dict[str, Any]]:
    """A message's content: its text, or, when it holds images or files, chat content parts
    (images as `image_url` parts, files as their text)."""
    if not any(isinstance(p, InputImage | InputFile) for p in parts):
        return _text(parts)
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, InputImage):
            url = {"url": p.image_url or "", "detail": p.detail}
            out.append({"type": "image_url", "image_url": url})
        elif isinstance(p, InputFile):
            out.append({"type": "text", "text": file_text(p)})
        else:
            out.append({"type": "text", "text": _text([p])})
    return out


def _tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


class _Messages:
    """Builds the chat messages; consecutive assistant text and calls share one message."""

    def __init__(self) -> None:
        self.out: list[dict[str, Any]] = []

    def add(self, message: dict[str, Any]) -> None:
        self.out.append(message)

    def assistant(self, text: str | None = None, call: dict[str, Any] | None = None) -> None:
        last = self.out[-1] if self.out else None
        if last is None or last["role"] != "assistant" or (text and last.get("tool_calls")):
            last = {"role": "assistant", "content": None}
            self.out.append(last)
        if text:
            last["content"] = (last["content"] or "") + text
        if call:
            last.setdefault("tool_calls", []).append(call)

    def item(self, item: InputItem | OutputItem) -> None:
        match function_view(item, SEPARATOR):
            case InputMessage(role="assistant", content=content):
                self.assistant(_text(content))
            case InputMessage(role=role, content=content):
                # "developer" is OpenAI's newer name; most chat templates know only "system".
                self.add(
                    {
                        "role": "system" if role == "developer" else role,
                        "content": _content(content),
                    }
                )
            case OutputMessage(content=content):
                self.assistant(_text(content))
            case (
                InputFunctionCall(call_id=cid, name=name, arguments=args)
                | FunctionCall(call_id=cid, name=name, arguments=args)
            ):
                self.assistant(call=_tool_call(cid, name, args))
            case FunctionCallOutput(call_id=cid, output=output):
                self.add({"role": "tool", "tool_call_id": cid, "content": output})
            case InputReasoning() | ReasoningItem():
                pass  # chat templates drop earlier reasoning; the upstream cannot take it back


def chat_messages(prompt: Prompt) -> list[dict[str, Any]]:
    """Instructions, then every earlier turn's input and output, then the current input."""
    messages = _Messages()
    if prompt.instructions:
        messages.add({"role": "system", "content": prompt.instructions})
    for turn in prompt.history:
        for item in [*turn.input, *turn.output]:
            messages.item(item)
    for item in prompt.input:
        messages.item(item)
    return messages.out


def _tool(tool: OfferedTool) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.qualified(SEPARATOR)}
    if tool.description is not None:
        function["description"] = tool.description
    function["parameters"] = tool.parameters or {"type": "object", "properties": {}}
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def tools_and_choice(prompt: Prompt) -> dict[str, Any]:
    """`tools` and `tool_choice`; a named tool or allowed_tools narrows the list (chat has no
    allowed_tools, and names a forced function by its qualified name)."""
    if not prompt.tools:
        return {}
    choice = prompt.tool_choice
    tools = narrowed(prompt.tools, choice)
    if not tools:  # a choice that leaves none (a hosted kind nothing here runs): no tools
        return {}
    wire: Any = choice
    if isinstance(choice, FunctionToolChoice | CustomToolChoice):
        wire = {"type": "function", "function": {"name": tools[0].qualified(SEPARATOR)}}
    elif isinstance(choice, AllowedToolsChoice):
        wire = choice.mode
    elif isinstance(choice, McpToolChoice | HostedToolChoice):
        wire = "required"  # one of what is left: that server's tools, or the built-in
    out: dict[str, Any] = {"tools": [_tool(t) for t in tools], "tool_choice": wire}
    out["parallel_tool_calls"] = prompt.parallel_tool_calls
    return out


def _response_format(prompt: Prompt) -> dict[str, Any] | None:
    fmt = prompt.text.format
    if isinstance(fmt, FormatJsonSchema):
        schema: dict[str, Any] = {"name": fmt.name, "schema": fmt.schema}
        if fmt.description:
            schema["description"] = fmt.description
        if fmt.strict is not None:
            schema["strict"] = fmt.strict
        return {"type": "json_schema", "json_schema": schema}
    if isinstance(fmt, FormatJsonObject):
        return {"type": "json_object"}
    return None


def chat_request(prompt: Prompt, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": chat_messages(prompt),
        "stream": True,
        "stream_options": {"include_usage": True},
        **tools_and_choice(prompt),
    }
    optional = {
        "max_tokens": prompt.max_output_tokens,
        "temperature": prompt.temperature,
        "top_p": prompt.top_p,
        "presence_penalty": prompt.presence_penalty or None,
        "frequency_penalty": prompt.frequency_penalty or None,
        "reasoning_effort": prompt.reasoning.effort,
        "response_format": _response_format(prompt),
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    body.update(prompt.hints)  # chat completions takes the same three fields
    if prompt.wants_logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = prompt.top_logprobs
    return body


# --- chat stream -> deltas --------------------------------------------------------------


class _Function(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, frozen=True):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct, frozen=True):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _TopLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class _TokenLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[_TopLogprob] = msgspec.field(default_factory=list)


class _Logprobs(msgspec.Struct, frozen=True):
    content: list[_TokenLogprob] | None = None


class _Choice(msgspec.Struct, frozen=True):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


def _logprobs(choice: _Choice) -> list[dict[str, Any]]:
    """A chunk's content logprobs as a Responses `output_text` holds them (`bytes` always
    present, as the Open Responses schema requires; chat may send null)."""
    if choice.logprobs is None or not choice.logprobs.content:
        return []

    def raw(token: str, given: list[int] | None) -> list[int]:
        return given if given is not None else list(token.encode())

    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "bytes": raw(t.token, t.bytes),
            "top_logprobs": [
                {"token": a.token, "logprob": a.logprob, "bytes": raw(a.token, a.bytes)}
                for a in t.top_logprobs
            ],
        }
        for t in choice.logprobs.content
    ]


class _PromptDetails(msgspec.Struct, frozen=True):
    cached_tokens: int | None = None


class _CompletionDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None


class _Chunk(msgspec.Struct, frozen=True):
    choices: list[_Choice] = msgspec.field(default_factory=list)
    usage: _Usage | None = None
    error: Any = None
    object: str | None = None
    message: str | None = None


_decoder = msgspec.json.Decoder(_Chunk)
_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "stop",
    "function_call": "stop",
    "length": "length",
    "content_filter": "content_filter",
}
Kind = Literal["reasoning", "text", "refusal", "call"]


def usage_of(usage: _Usage | None) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    prompt, completion = usage.prompt_tokens_details, usage.completion_tokens_details
    return TokenUsage(
        input_tokens=usage.prompt_tokens,
        cached_tokens=(prompt.cached_tokens or 0) if prompt else 0,
        output_tokens=usage.completion_tokens,
        reasoning_tokens=(completion.reasoning_tokens or 0) if completion else 0,
    )


class ChatStream:
    """Chat-completion chunks in, semantic deltas out; pure, so tests feed it directly.

    Tool calls arrive by `index`, each one's arguments streamed after its name; a call
    whose index was already closed cannot reopen (the Responses item is done), so an
    upstream that interleaves calls is refused.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.kind: Kind | None = None
        self.call_index: int | None = None
        self.closed_calls: set[int] = set()
        self.finish_reason: FinishReason | None = None
        self.usage: _Usage | None = None
        # Scores of tokens whose text was empty (a character split across tokens comes
        # with the next one): they go with the next text, so every token keeps its score.
        self.held_logprobs: list[dict[str, Any]] = []

    def on_chunk(self, data: bytes | str) -> list[AnyDelta]:
        try:
            chunk = _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise protocol_error(self.what, f"malformed chunk ({e}): {preview(data)}") from e
        if chunk.error is not None or chunk.object == "error":
            raise self._error(chunk)
        if chunk.usage is not None:
            self.usage = chunk.usage
        out: list[AnyDelta] = []
        for choice in chunk.choices:
            if choice.index == 0:
                self._choice(choice, out)
        return out

    def _error(self, chunk: _Chunk) -> EngineError:
        error = chunk.error
        message = error.get("message") if isinstance(error, dict) else error or chunk.message
        return EngineError(
            f"{self.what} failed the generation: {message}", code="engine_stream_error"
        )

    def _choice(self, choice: _Choice, out: list[AnyDelta]) -> None:
        delta = choice.delta
        if delta is not None:
            reasoning = delta.reasoning_content or delta.reasoning  # never both: same text
            self._text("reasoning", reasoning, out)
            scores = _logprobs(choice)
            if scores and not delta.content and self._textless_text_token(delta):
                self.held_logprobs += scores
            self._text("text", delta.content, out, scores)
            self._text("refusal", delta.refusal, out)
            for call in delta.tool_calls or []:
                self._tool_call(call, out)
        if choice.finish_reason is not None:
            reason = _REASONS.get(choice.finish_reason)
            if reason is None:
                raise protocol_error(self.what, f"unknown finish_reason {choice.finish_reason!r}")
            self.finish_reason = reason
            self._switch(None, out)

    def _textless_text_token(self, delta: _Delta) -> bool:
        """Whether scores that came with no content belong to the answer's text: a token of
        a character split across tokens, in or before a message. Not those of reasoning (a
        chat upstream may score its tokens too; the Responses API scores only output text)
        or of a tool call."""
        return self.kind in (None, "text") and not delta.tool_calls and not delta.refusal

    def _switch(self, kind: Kind | None, out: list[AnyDelta]) -> None:
        if self.kind is not None and kind != self.kind:
            if self.kind == "text" and self.held_logprobs:
                # The message ends on tokens whose character never completed (cut off at
                # `max_tokens`, say): their scores go out with no text rather than be lost.
                held, self.held_logprobs = self.held_logprobs, []
                out.append(TextDelta(text="", logprobs=held))
            out.append(EndItem())
            if self.kind == "call" and self.call_index is not None:
                self.closed_calls.add(self.call_index)
                self.call_index = None
        self.kind = kind

    def _text(
        self,
        kind: Kind,
        text: str | None,
        out: list[AnyDelta],
        logprobs: list[dict[str, Any]] | None = None,
    ) -> None:
        if not text:
            return
        # Refusal joins the open message; text and refusal are one message's parts.
        if not (kind == "refusal" and self.kind == "text"):
            self._switch(kind, out)
        if kind == "reasoning":
            out.append(ReasoningDelta(text=text))
        elif kind == "text":
            held, self.held_logprobs = self.held_logprobs, []
            out.append(TextDelta(text=text, logprobs=[*held, *(logprobs or [])]))
        else:
            out.append(RefusalDelta(text=text))

    def _tool_call(self, call: _ToolCallDelta, out: list[AnyDelta]) -> None:
        index = call.index if call.index is not None else (self.call_index or 0)
        function = call.function or _Function()
        if index != self.call_index:
            if index in self.closed_calls:
                raise protocol_error(self.what, f"tool call {index} continued after it ended")
            if not function.name:
                raise protocol_error(self.what, f"tool call {index} starts without a name")
            self._switch(None, out)
            out.append(FunctionCallStart(name=function.name, call_id=call.id))
            self.kind, self.call_index = "call", index
        if function.arguments:
            out.append(ArgumentsDelta(text=function.arguments))

    def finished(self) -> Finished:
        if self.finish_reason is None:
            raise protocol_error(self.what, "the stream ended without a finish_reason")
        if self.usage is None:
            log.warning("%s sent no usage (stream_options.include_usage ignored)", self.what)
        return Finished(reason=self.finish_reason, usage=usage_of(self.usage))


# --- the engine -------------------------------------------------------------------------


async def _unchecked(prompt: Prompt) -> None:
    """No rule on image URLs: an engine made outside the composition root (tests)."""


class OpenAIChatEngine(HttpEngine):
    """An OpenAI-compatible chat-completions upstream."""

    name = "openai-chat"
    media: frozenset[str] = frozenset(
        {"image", "file"}
    )  # images as image parts; files as their text

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeouts: Timeouts | None = None,
        extra_body: Mapping[str, Any] | None = None,
        check_images: Callable[[Prompt], Awaitable[None]] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        # The upstream fetches an image named by URL, so its host must pass the operator's
        # host rule first (the composition root gives adapters/tools/images.py's check,
        # which says why the URL is checked and not fetched here).
        self.check_images = check_images or _unchecked
        self.model = model
        # Upstream-specific request fields (vLLM's `min_tokens`, `top_k`, ...), sent as is.
        self.extra_body = dict(extra_body or {})
        self.served: list[str] = []
        # vLLM's `/v1/models` gives each model's `max_model_len` (OpenAI's own API does not).
        self.windows: dict[str, int] = {}
        what = f"chat-completions upstream at {self.base_url}"
        super().__init__(timeouts or Timeouts(), api_key, what)

    async def start(self) -> None:
        """Learn the served models from `/v1/models`; a configured model that is not among
        them is an error. Without a configured model, the first served one is used."""
        try:
            listing = await self._http.get_json(self.base_url + "/v1/models", self._what)
        except EngineError as e:
            if self.model and e.code == "engine_bad_request":  # no /v1/models: trust config
                log.warning("%s lists no models (%s); using %s", self._what, e, self.model)
                return
            raise
        data = listing.get("data") if isinstance(listing, dict) else None
        self.served = [m["id"] for m in data or [] if isinstance(m, dict) and "id" in m]
        self.windows = {
            m["id"]: m["max_model_len"]
            for m in data or []
            if isinstance(m, dict)
            and "id" in m
            and isinstance(m.get("max_model_len"), int)
            and m["max_model_len"] > 0
        }
        if self.model and self.served and self.model not in self.served:
            raise EngineError(
                f"{self._what} does not serve {self.model!r} (it serves {self.served})",
                code="model_not_found",
            )
        if not self.model and not self.served:
            raise EngineError(f"{self._what} serves no model", code="model_not_found")

    def models(self) -> list[str]:
        if self.model:
            return [self.model]
        return self.served[:1]

    async def ready(self) -> bool:
        return await self._http.status("GET", self.base_url + "/v1/models") == 200

    def upstream_model(self, prompt: Prompt) -> str:
        """The prompt's model if the upstream serves it, else the configured one."""
        return self.upstream_model_name(prompt.model)

    def context_window(self, model: str) -> int | None:
        return self.windows.get(self.upstream_model_name(model))

    def upstream_model_name(self, model: str) -> str:
        if model in self.served or not (self.model or self.served):
            return model
        return self.model or self.served[0]

    async def count_tokens(self, prompt: Prompt) -> int:
        """The upstream's own count of the chat prompt (vLLM's `POST /tokenize` with the
        messages and tools, as its chat template renders them); an upstream without that
        endpoint cannot count."""
        await self.check_images(prompt)  # vLLM's /tokenize fetches the images too
        request = chat_request(prompt, self.upstream_model(prompt))
        body: dict[str, Any] = {
            k: request[k] for k in ("model", "messages", "tools") if k in request
        }
        body["add_generation_prompt"] = True
        status, data = await self._http.post_json(self.base_url + "/tokenize", body, self._what)
        if status in (404, 405):
            raise EngineError(f"{self._what} has no /tokenize endpoint", code="tokens_uncountable")
        if status >= 300:
            raise status_error(self._what, status, b"")
        count = data.get("count") if isinstance(data, dict) else None
        if not isinstance(count, int):
            raise protocol_error(self._what, f"/tokenize answered no count: {data!r}"[:200])
        return count

    async def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        await self.check_images(prompt)
        body = {**chat_request(prompt, self.upstream_model(prompt)), **self.extra_body}
        limit = deadline(self.timeouts)
        url = self.base_url + "/v1/chat/completions"
        response = await self._http.open_stream(url, body, self._what, limit)
        stream = ChatStream(self._what)
        try:
            reading = Reading()
            async with contextlib.aclosing(
                read_deltas(response.content.readany, self._what, limit, stream.on_chunk, reading)
            ) as deltas:
                async for delta in deltas:
                    yield delta
            done = reading.done
            if not done and stream.finish_reason is None:
                raise EngineError(
                    f"{self._what} ended the stream before the generation finished",
                    code="engine_disconnected",
                )
            yield stream.finished()
        finally:
            response.close()  # how a chat upstream is told to stop generating


if TYPE_CHECKING:  # the port is structural: let mypy prove this adapter fits it
    from service.ports import Engine

    def _fits_the_port(engine: OpenAIChatEngine) -> Engine:
        return engine
