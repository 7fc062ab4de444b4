"""Parse gpt-oss output token ids into semantic deltas, read by `HarmonyStream` (harmony's
`StreamableParser`, step for step, without its cost a header token: stream.py).

`analysis` is reasoning, `final` the answer, `commentary` to `functions.x` a call of `x`
(its content the arguments), `commentary` with no recipient a preamble. Each message
boundary ends the item; a message cut off mid-way is left open, for `finish()` to close it
as incomplete.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec
from openai_harmony import HarmonyError

from adapters.engines.harmony.stream import HarmonyStream, Vocabulary, vocabulary
from domain.errors import EngineError
from domain.generation import (
    AnyDelta,
    ArgumentsDelta,
    EndItem,
    FunctionCallStart,
    ReasoningDelta,
    TextDelta,
)

Kind = Literal["reasoning", "preamble", "answer", "call"]


def classify(channel: str | None, recipient: str | None) -> Kind:
    """What a message is, from its header. A recipient makes it a tool call whatever its
    channel (gpt-oss sometimes addresses tools from `analysis`)."""
    if recipient:
        return "call"
    if channel == "analysis":
        return "reasoning"
    if channel == "commentary":
        return "preamble"
    return "answer"


def function_name(recipient: str) -> str:
    """`functions.get_weather` calls `get_weather`; any other recipient (a built-in tool the
    model imagines) is passed on whole, so the client sees what was asked."""
    return recipient.removeprefix("functions.")


def _delta(kind: Kind, text: str) -> AnyDelta:
    if kind == "reasoning":
        return ReasoningDelta(text=text)
    if kind == "preamble":
        return TextDelta(text=text, phase="commentary")
    if kind == "answer":
        return TextDelta(text=text, phase="final_answer")
    return ArgumentsDelta(text=text)


class TokenScore(msgspec.Struct, frozen=True, kw_only=True):
    """An output token's log probability and its engine's top alternatives (logprob,
    token id, text), as the engine reported them."""

    logprob: float
    alternatives: list[tuple[float, int, str]] = msgspec.field(default_factory=list)


def _entry(text: str, token: int, score: TokenScore, vocab: Vocabulary) -> dict[str, Any]:
    """A token of the answer in openai-python's `Logprob` shape. `token` is the text the
    stream decoded at this token (empty for a piece of a character that a later token
    completes, so the entries' tokens join into the answer's text); `bytes` are the
    token's own, as the API documents them: joined, they are the text's UTF-8 even where
    a character is split across tokens."""
    return {
        "token": text,
        "logprob": score.logprob,
        "bytes": _bytes(vocab, token, text),
        "top_logprobs": [
            {"token": t, "logprob": lp, "bytes": _bytes(vocab, i, t)}
            for lp, i, t in score.alternatives
        ],
    }


def _bytes(vocab: Vocabulary, token: int, text: str) -> list[int]:
    try:
        return list(vocab.token_bytes(token))
    except Exception:  # an id the vocabulary lacks (the engine's own): the text's UTF-8
        return list(text.encode())


class HarmonyParser:
    """Incremental: feed each chunk's new token ids, get the deltas they complete."""

    def __init__(self, encoding: Any) -> None:
        self._parser = HarmonyStream(encoding)
        # `<|message|>`, and the message ends (`<|end|>`, `<|call|>`, `<|return|>`: harmony's
        # stop tokens), as the stream found them once for the encoding.
        vocab = self._vocab = vocabulary(encoding)
        self._message_token, self._end_tokens = vocab.message, vocab.stops
        self._kind: Kind | None = None  # the open message's kind, once its header is read
        self._opened = False  # whether a delta of the open message was yielded
        self._message_tokens = 0
        self.tokens = 0
        self.reasoning_tokens = 0  # every token of analysis messages, headers included
        # Scores of the answer's tokens not yet given out: they go with its next text (a
        # character split across tokens, and chunks, has none until it completes), or at
        # its end.
        self._held: list[dict[str, Any]] = []

    def prime(self, token_ids: Iterable[int]) -> None:
        """Read tokens the prompt already holds (a message header it opens for the model,
        `<|channel|>final<|message|>`): they set the parser's state but are not output."""
        self.feed(token_ids)
        self.tokens = self._message_tokens = 0

    def feed(
        self, token_ids: Iterable[int], scores: list[TokenScore] | None = None
    ) -> list[AnyDelta]:
        """Deltas for these tokens; consecutive text of one message is merged into one.
        With `scores` (one per token), the answer's text carries its tokens' logprobs."""
        out: list[AnyDelta] = []
        pending: list[str] = []
        for k, token in enumerate(token_ids):
            self._process(token)
            if token == self._message_token:
                self._header_done(out)
            elif token in self._end_tokens:
                self._flush(out, pending)
                self._message_done(out)
            elif self._kind is not None:
                text = self._parser.last_content_delta or ""
                if text:
                    pending.append(text)
                if scores is not None and self._kind == "answer":
                    self._held.append(_entry(text, token, scores[k], self._vocab))
        self._flush(out, pending)
        return out

    def _process(self, token: int) -> None:
        self.tokens += 1
        self._message_tokens += 1
        try:
            self._parser.process(token)
        except HarmonyError as e:
            raise EngineError(
                f"gpt-oss output is not valid harmony at output token {self.tokens} "
                f"(id {token}): {e}",
                code="engine_output_invalid",
            ) from e

    def _header_done(self, out: list[AnyDelta]) -> None:
        recipient = self._parser.current_recipient
        self._kind = classify(self._parser.current_channel, recipient)
        if self._kind == "call":
            out.append(FunctionCallStart(name=function_name(recipient or "")))
            self._opened = True

    def _flush(self, out: list[AnyDelta], pending: list[str]) -> None:
        if pending and self._kind is not None:
            delta = _delta(self._kind, "".join(pending))
            if self._held and isinstance(delta, TextDelta):
                delta = msgspec.structs.replace(delta, logprobs=self._held)
                self._held = []
            out.append(delta)
            self._opened = True
            pending.clear()

    def release(self) -> list[AnyDelta]:
        """The held scores of an answer that ends (or is cut off) before their character
        completed, as a delta with no text: every token keeps its score."""
        if not self._held or self._kind != "answer":
            return []
        held, self._held = self._held, []
        self._opened = True
        return [TextDelta(text="", phase="final_answer", logprobs=held)]

    def _message_done(self, out: list[AnyDelta]) -> None:
        out += self.release()
        if self._opened:
            out.append(EndItem())
        if self._kind == "reasoning":
            self.reasoning_tokens += self._message_tokens
        self._kind, self._opened, self._message_tokens = None, False, 0

    @property
    def open_reasoning_tokens(self) -> int:
        """Tokens of an analysis message still open (cut off), for usage accounting."""
        return self._message_tokens if self._kind == "reasoning" else 0
