"""The scripted engine: plays back a deterministic script derived from the request.

Not a model, and never presented as one (its model card says `scripted`): it is the
zero-GPU default for demos, tests and benchmarks. A request with callable tools gets a
function call (unless the last input is a tool's output); otherwise it gets a short
reasoning block and an answer that quotes the input. `delay_s` paces the deltas and
`tokens` fixes the answer's length; a request may override both with the metadata keys
`scripted_delay_ms` and `scripted_tokens` (so one server can play fast and slow scripts),
within the server's maxima: a request must not be able to hold the server's resources.
`scripted_mode=fail` makes the engine fail after the script, so tests reach `failed`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import operator
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import msgspec

from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    Finished,
    FunctionCallStart,
    History,
    InputDelta,
    Prompt,
    ReasoningDelta,
    TextDelta,
    TokenUsage,
    Turn,
)
from domain.objects import (
    CustomToolCallOutput,
    FormatJsonObject,
    FormatJsonSchema,
    FunctionCallOutput,
    InputFile,
    InputImage,
    InputItem,
    InputMessage,
    InputReasoning,
    InputText,
    OutputMessage,
    OutputText,
)
from domain.tools import OfferedTool, narrowed

KEPT_ABORTS = 1000
log = logging.getLogger("resplog.engine.scripted")


def _words(text: str) -> list[str]:
    """Split into word tokens that keep their leading space, so joining restores text."""
    out: list[str] = []
    for i, word in enumerate(text.split(" ")):
        out.append(word if i == 0 else " " + word)
    return [w for w in out if w]


def _item_text(item: InputItem) -> str:
    if isinstance(item, InputMessage):
        return " ".join(p.text for p in item.content if isinstance(p, InputText | OutputText))
    if isinstance(item, FunctionCallOutput | CustomToolCallOutput):
        return item.output
    if isinstance(item, InputReasoning):  # what the engine was given of it
        return "".join(t.text for t in item.content)
    return ""


def _turn_words(turn: Turn) -> int:
    words = len((turn.instructions or "").split())
    words += sum(len(_item_text(i).split()) for i in turn.input)
    for out in turn.output:
        if isinstance(out, OutputMessage):
            words += sum(len(p.text.split()) for p in out.content if isinstance(p, OutputText))
    return words


def _prompt_words(prompt: Prompt) -> tuple[int, int]:
    """(all prompt words, words of the earlier turns): a stand-in for token counts."""
    if isinstance(prompt.history, History):  # carried along the chain, not recounted
        history = prompt.history.running("scripted.words", _turn_words, operator.add)
    else:
        history = sum(map(_turn_words, prompt.history))
    current = len((prompt.instructions or "").split())
    current += sum(len(_item_text(i).split()) for i in prompt.input)
    return history + current, history


def _tool_to_call(prompt: Prompt) -> OfferedTool | None:
    """The first tool the choice leaves, unless the last input answers a call; or with the
    metadata `scripted_calls` ("a,b,c"), the tools it names, one per step of a loop."""
    if not prompt.tools or prompt.tool_choice == "none":
        return None
    plan = prompt.metadata.get("scripted_calls")
    if plan is not None:
        # A scripted tool loop (docs/mcp.md): the k-th named tool while k tool outputs are in.
        names = [n for n in plan.split(",") if n]
        made = sum(isinstance(i, FunctionCallOutput) for i in prompt.input)
        if made >= len(names):
            return None
        return next((t for t in prompt.tools if t.name == names[made]), None)
    if prompt.input and isinstance(prompt.input[-1], FunctionCallOutput | CustomToolCallOutput):
        return None
    tools = narrowed(prompt.tools, prompt.tool_choice)
    return tools[0] if tools else None


def _example(schema: dict[str, Any], text: str) -> object:
    """A value of the property's declared type. A `number` is written as an integer, a
    valid JSON number that a client parsing it as an integer also takes (Codex reads
    `exec_command`'s `max_output_tokens`, a schema `number`, as a `usize`)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):  # `["integer", "null"]`: the first type that is not null
        kind = next((k for k in kind if k != "null"), None)
    return {
        "string": text[:40],
        "integer": len(text.split()),
        "number": len(text.split()),
        "boolean": True,
        "array": [],
        "object": {},
    }.get(str(kind), text[:40])


def _arguments(tool: OfferedTool, text: str) -> str:
    """Arguments with the schema's `required` properties only: a client may refuse an
    optional one it did not expect a value of (an optional property has no safe default)."""
    schema = tool.parameters or {}
    props = schema.get("properties") or {}
    required = [name for name in schema.get("required") or [] if name in props]
    specs = {name: props[name] if isinstance(props[name], dict) else {} for name in required}
    args = {name: _example(spec, text) for name, spec in specs.items()}
    return json.dumps(args, separators=(",", ":"))


def _last_user_text(prompt: Prompt) -> str:
    for item in reversed(prompt.input):
        if isinstance(item, InputMessage) and item.role == "user":
            return _item_text(item)
    return ""


def _received(prompt: Prompt) -> str:
    """What the last user message held beside text: ` [received: image (image/png, 68
    bytes), file notes.txt (text/plain, 12 bytes)]`, so tests see media reach the engine."""
    for item in reversed(prompt.input):
        if isinstance(item, InputMessage) and item.role == "user":
            seen = [_describe(p) for p in item.content if isinstance(p, InputImage | InputFile)]
            return f" [received: {', '.join(seen)}]" if seen else ""
    return ""


def _describe(part: InputImage | InputFile) -> str:
    url = (part.image_url if isinstance(part, InputImage) else part.file_data) or ""
    what = "image" if isinstance(part, InputImage) else f"file {part.filename or '(unnamed)'}"
    if not url.startswith("data:"):
        return f"{what} (a URL)"
    header, _, payload = url.partition(",")
    size = len(payload) * 3 // 4 - payload.count("=")
    return f"{what} ({header.removeprefix('data:').split(';')[0]}, {size} bytes)"


def _line(role: str, text: str) -> str:
    return f"{role}: {text}"


def transcript(prompt: Prompt) -> str:
    """The conversation as the engine received it, one `role: text` entry per item
    (metadata `scripted_mode=transcript`), so a test can see the prompt end to end."""
    lines: list[str] = []
    for turn in prompt.history:
        lines += [_line(_role(i), _item_text(i)) for i in turn.input]
        lines += [_line("assistant", _output_text(o)) for o in turn.output if _output_text(o)]
    lines += [_line(_role(i), _item_text(i)) for i in prompt.input]
    return " | ".join(lines)


def _role(item: InputItem) -> str:
    if isinstance(item, InputMessage):
        return item.role
    return str(type(item).__struct_config__.tag)


def _output_text(item: object) -> str:
    if isinstance(item, OutputMessage):
        return "".join(p.text for p in item.content if isinstance(p, OutputText))
    return ""


def _call(tool: OfferedTool, text: str) -> Iterator[AnyDelta]:
    """A call of `tool`: example arguments from its schema, or for a custom tool the user's
    text as its input, in chunks of 8 characters."""
    ns = tool.namespace
    body = text if tool.custom else _arguments(tool, text)
    yield FunctionCallStart(name=tool.name, namespace=ns, custom=tool.custom)
    chunks = [body[i : i + 8] for i in range(0, len(body), 8)]
    yield from (InputDelta(text=c) if tool.custom else ArgumentsDelta(text=c) for c in chunks)
    yield EndItem()


def script(prompt: Prompt, tokens: int | None) -> Iterator[AnyDelta]:
    """The deterministic deltas for a prompt (without the final `Finished`), made as they
    are taken: a long answer is never held as a list."""
    text = _last_user_text(prompt)
    yield from (
        ReasoningDelta(text=w) for w in _words(f"The user wrote {len(text.split())} words.")
    )
    yield EndItem()
    tool = _tool_to_call(prompt)
    if tool is not None:
        yield from _call(tool, text)
        return
    last = prompt.input[-1] if prompt.input else None
    if prompt.metadata.get("resplog_compaction") == "1":  # a compaction's summary
        answer = "Summary: " + transcript(msgspec.structs.replace(prompt, input=prompt.input[:-1]))
    elif prompt.metadata.get("scripted_mode") == "transcript":
        answer = transcript(prompt)
    elif isinstance(last, FunctionCallOutput | CustomToolCallOutput):
        answer = f"The function returned: {last.output}"
    else:
        answer = f"You said: {text}" if text else "Hello from the scripted engine."
        answer += _received(prompt)
    structured = structured_answer(prompt, answer)
    words: Iterator[str] = iter(_words(structured or answer))
    if tokens is not None and structured is None:  # JSON is never cut or repeated
        words = itertools.islice(itertools.cycle(_words(answer)), tokens)
    yield from (TextDelta(text=w) for w in words)
    yield EndItem()


def structured_answer(prompt: Prompt, answer: str) -> str | None:
    """For a `json_schema` text format, a JSON document valid against the schema (built
    from it: required and optional properties, `$ref`s, enums, the first branch of a
    union); for `json_object`, `{"answer": ...}`; else None."""
    fmt = prompt.text.format
    if isinstance(fmt, FormatJsonSchema):
        return json.dumps(schema_instance(fmt.schema, answer))
    if isinstance(fmt, FormatJsonObject):
        return json.dumps({"answer": answer})
    return None


def schema_instance(schema: dict[str, Any], text: str) -> object:
    """A JSON value valid against `schema`, its strings `text` (the sglang stand-in plays
    one back as a grammar-constrained answer would be)."""
    defs = {**schema.get("$defs", {}), **schema.get("definitions", {})}
    return _instance(schema, defs, text, 0)


def _instance(schema: Any, defs: dict[str, Any], text: str, depth: int) -> object:
    if not isinstance(schema, dict) or depth > 16:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _instance(defs.get(ref.rsplit("/", 1)[-1]), defs, text, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        branches = [b for b in schema.get(key) or [] if b.get("type") != "null"]
        if branches:
            return _instance(branches[0], defs, text, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _instance(v, defs, text, depth + 1) for k, v in props.items()}
    if kind == "array":
        return [_instance(schema.get("items"), defs, text, depth + 1)]
    simple = {"integer": len(text.split()), "number": 1.5, "boolean": True, "null": None}
    return simple.get(str(kind), text)


def _finite(key: str, value: str | None) -> float | None:
    """A metadata number, or None (and a warning) when absent, malformed or not finite."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        log.warning("scripted engine: ignoring %s=%.40r (not a finite number)", key, value)
        return None
    return number


def with_logprobs(delta: TextDelta, top: int) -> TextDelta:
    """A script is certain of every token it plays: log probability 0 for the token, and
    no other alternative (any other has probability 0, a log of minus infinity that JSON
    cannot hold), so `top_logprobs` holds the token itself when `top` is at least 1."""
    raw = list(delta.text.encode())
    entry = {"token": delta.text, "logprob": 0.0, "bytes": raw}
    alternatives = [entry] if top >= 1 else []
    return msgspec.structs.replace(delta, logprobs=[{**entry, "top_logprobs": alternatives}])


class ScriptedEngine:
    """Plays back `script(prompt)`; records generations it started and aborted."""

    name = "scripted"
    media: frozenset[str] = frozenset({"image", "file"})  # it names what it received

    def __init__(
        self,
        *,
        delay_s: float = 0.0,
        tokens: int | None = None,
        model: str = "scripted",
        max_tokens: int = 100_000,
        max_delay_s: float = 10.0,
        only_model: bool = False,
    ) -> None:
        self.delay_s = delay_s
        self.tokens = tokens
        self.model = model
        # An operator who named the model (`--model`) serves that name only: a replica
        # started with the wrong engine flags then refuses a real model's name rather than
        # answering it with the script.
        self.only_model = only_model
        # The most a request's metadata may ask for (the server's own `delay_s` and
        # `tokens` are the operator's choice): a script then ends within about
        # max_tokens x max_delay_s, and a cancel or a gone client ends it sooner.
        self.max_tokens = max_tokens
        self.max_delay_s = max_delay_s
        # The ids of the generations ended before their script did, newest last (the
        # tests' view of an abort); only the last `KEPT_ABORTS`, so that a long-running
        # server does not keep an id for every cancelled or dropped response.
        self.aborted: list[str] = []

    async def aclose(self) -> None:
        """Nothing to release: the script holds no connection."""

    def models(self) -> list[str]:
        return [self.model]

    def serves(self, model: str) -> bool:
        """Any name unless one was configured: the script is not a model."""
        return not self.only_model or model == self.model

    async def ready(self) -> bool:
        return True

    async def count_tokens(self, prompt: Prompt) -> int:
        """The words of the prompt: what this engine reports as `input_tokens`."""
        return _prompt_words(prompt)[0]

    def context_window(self, model: str) -> int | None:
        """None: a script has no window (`--context-window` gives it one)."""
        return None

    def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        """The script, one delta at a time, paced by its own clock."""
        return self._play(prompt)

    def _shape(self, prompt: Prompt) -> tuple[float, int | None]:
        """The request's pace and length: clamped into [0, max_delay_s] and [1, max_tokens];
        a value that is not a finite number is ignored (the server's own applies)."""
        delay, tokens = self.delay_s, self.tokens
        asked_ms = _finite("scripted_delay_ms", prompt.metadata.get("scripted_delay_ms"))
        if asked_ms is not None:
            delay = min(max(0.0, asked_ms / 1000), self.max_delay_s)
        asked = _finite("scripted_tokens", prompt.metadata.get("scripted_tokens"))
        if asked is not None:
            tokens = int(min(max(1.0, asked), self.max_tokens))
        return delay, tokens

    async def _play(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        delay, tokens = self._shape(prompt)
        budget = prompt.max_output_tokens
        prompt_words, cached = _prompt_words(prompt)
        emitted = reasoning = 0
        cut = finished = False
        try:
            for delta in script(prompt, tokens):
                counts = not isinstance(delta, EndItem | FunctionCallStart)
                if counts and budget is not None and emitted >= budget:
                    cut = True
                    break
                await asyncio.sleep(delay)
                if isinstance(delta, TextDelta) and prompt.wants_logprobs:
                    delta = with_logprobs(delta, prompt.top_logprobs)
                yield delta
                emitted += counts
                reasoning += isinstance(delta, ReasoningDelta)
            usage = TokenUsage(
                input_tokens=prompt_words,
                cached_tokens=cached,
                output_tokens=emitted,
                reasoning_tokens=reasoning,
            )
            finished = True
            if prompt.metadata.get("scripted_mode") == "fail":
                # A test device, like `transcript`: an engine that fails after its output.
                raise EngineError("the script was asked to fail (scripted_mode=fail)")
            yield Finished(reason="length" if cut else "stop", usage=usage)
        finally:
            if not finished:
                self.aborted.append(prompt.response_id)
                if len(self.aborted) > 2 * KEPT_ABORTS:
                    del self.aborted[:-KEPT_ABORTS]
                log.info("scripted engine: aborted %s after %d deltas", prompt.response_id, emitted)
