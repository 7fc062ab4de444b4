"""`HarmonyStream` against openai-harmony's own `StreamableParser` (strict), token by token:
the same channel, recipient, content type and content delta after every token, and an error
at the same token, for completions gpt-oss writes and for sequences of any tokens."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_harmony import (
    Author,
    Conversation,
    HarmonyError,
    Message,
    Role,
    StreamableParser,
)

from adapters.engines.harmony import gpt_oss_encoding, stream
from adapters.engines.harmony.stream import HarmonyStream

Seen = tuple[str | None, str | None, str | None, str | None]


def seen(parser: Any) -> Seen:
    return (
        parser.current_channel,
        parser.current_recipient,
        parser.current_content_type,
        parser.last_content_delta,
    )


def both(encoding: Any, tokens: list[int]) -> tuple[list[Seen | str], list[Seen | str]]:
    """What each parser shows after each token, until the first error ("error")."""
    theirs, ours = StreamableParser(encoding, Role.ASSISTANT), HarmonyStream(encoding)
    out: tuple[list[Seen | str], list[Seen | str]] = ([], [])
    for parser, steps in ((theirs, out[0]), (ours, out[1])):
        for token in tokens:
            try:
                parser.process(token)
            except HarmonyError:
                steps.append("error")
                break
            steps.append(seen(parser))
    return out


def completion(encoding: Any, *messages: Message) -> list[int]:
    """What the model writes after `<|start|>assistant`: the messages, the first one's
    `<|start|>assistant` left out, each ended as rendered (`<|end|>`, `<|call|>`)."""
    ids = list(encoding.render_conversation(Conversation.from_messages(list(messages))))
    head = list(
        encoding.render_conversation_for_completion(Conversation(messages=[]), Role.ASSISTANT)
    )
    assert ids[: len(head)] == head
    return ids[len(head) :]


def assistant(text: str, channel: str | None = None) -> Message:
    message = Message.from_role_and_content(Role.ASSISTANT, text)
    return message.with_channel(channel) if channel else message


COMPLETIONS = {
    "reasoning, then the answer": [
        assistant("The user wrote one word.", "analysis"),
        assistant("You said: bench. ¿Qué tal? 東京は晴れ 🌤️ \u2013 fine.", "final"),
    ],
    "a preamble and a function call": [
        assistant("Let me check.", "commentary"),
        assistant('{"location":"Tokyo"}', "commentary")
        .with_recipient("functions.get_weather")
        .with_content_type("<|constrain|>json"),
    ],
    "a built-in call from the analysis": [
        assistant("Search it.", "analysis"),
        assistant('{"query":"weather"}', "analysis")
        .with_recipient("browser.search")
        .with_content_type("code"),
    ],
    "a namespaced call, then a tool's answer and the final": [
        assistant("{}", "commentary").with_recipient("crm.lookup"),
        Message.from_author_and_content(Author.new(Role.TOOL, "crm.lookup"), "ok")
        .with_channel("commentary")
        .with_recipient("assistant"),
        assistant("Done.", "final"),
    ],
    "no channel": [assistant("plain")],
}


@functools.cache
def encoding() -> Any:
    return gpt_oss_encoding()


@pytest.mark.parametrize("name", list(COMPLETIONS))
def test_what_gpt_oss_writes_is_read_as_harmony_reads_it(name: str) -> None:
    tokens = completion(encoding(), *COMPLETIONS[name])
    theirs, ours = both(encoding(), tokens)
    assert "error" not in theirs
    assert ours == theirs


def test_a_header_gpt_oss_writes_with_the_recipient_first() -> None:
    enc = encoding()
    text = (
        '<|channel|>commentary to=functions.get_weather<|constrain|>json<|message|>{"a":1}<|call|>'
    )
    tokens = enc.encode(text, allowed_special="all")
    theirs, ours = both(enc, tokens)
    assert ours == theirs
    assert theirs[-2] == ("commentary", "functions.get_weather", "<|constrain|>json", "}")


@functools.cache
def pieces() -> list[int]:
    """Tokens a sequence is drawn from: the formatting tokens, header words, and tokens
    that are pieces of a character (not UTF-8 on their own)."""
    enc = encoding()
    special = [
        enc.encode(t, allowed_special="all")[0]
        for t in (
            "<|start|>",
            "<|message|>",
            "<|end|>",
            "<|call|>",
            "<|return|>",
            "<|channel|>",
            "<|constrain|>",
        )
    ]
    words = [
        t
        for w in (
            "analysis",
            "final",
            "commentary",
            " to=functions.f",
            "to=browser.search",
            "assistant",
            "user",
            "tool",
            " json",
            "code",
            " ",
            "\n",
            "\x1c",
            "\u3000",
            "<",
            "Hello",
            " 東京",
            "🌤️",
            "é",
        )
        for t in enc.encode(w, disallowed_special=())
    ]
    split = []
    for token in range(100_000, 200_000, 7):
        try:
            enc.decode([token], errors="strict")
        except UnicodeDecodeError:
            split.append(token)
        if len(split) == 40:
            break
    return special + words + split


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_any_sequence_of_tokens_is_read_as_harmony_reads_it(data: st.DataObject) -> None:
    tokens = data.draw(st.lists(st.sampled_from(pieces()), max_size=40))
    theirs, ours = both(encoding(), tokens)
    assert ours == theirs


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(list(range(0x80, 0x100))), max_size=12))
def test_broken_characters_become_what_harmony_makes_of_them(data: list[int]) -> None:
    """Content of raw bytes, valid UTF-8 or not, a token a byte."""
    enc = encoding()
    head = enc.encode("<|channel|>final<|message|>", allowed_special="all")
    theirs, ours = both(enc, head + [byte_tokens()[b] for b in data])
    assert ours == theirs


@functools.cache
def byte_tokens() -> dict[int, int]:
    """The token whose bytes are exactly one byte, for each byte."""
    enc, found = encoding(), {}
    for token in range(200_000):
        raw = enc.decode([token], errors="surrogateescape").encode("utf-8", "surrogateescape")
        if len(raw) == 1:
            found.setdefault(raw[0], token)
    assert len(found) == 256
    return found


HEADERS = [
    "<|channel|>final",
    "<|channel|>",
    "<|channel|> final",
    "<|channel|>final\x1c",
    "<|channel|>final\u2028 to=x",
    "\x1c",
    "\x1d to=functions.f",
    "\u3000to=functions.f\u3000",
    "to=functions.f<|constrain|>json",
    " to=functions.f <|constrain|>json <|channel|>commentary",
    "<|channel|>commentary to=functions.f json extra",
    "assistant<|channel|>final",
    "assistant",
    "functions.f",
    "a b",
]


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("second", [False, True])
def test_a_header_is_read_as_harmony_reads_it(header: str, second: bool) -> None:
    """The first message's header (its role known: the assistant's) and a later one's
    (after `<|start|>`, its role read from the header)."""
    enc = encoding()
    first = "<|channel|>final<|message|>Hi<|end|><|start|>" if second else ""
    text = f"{first}{header}<|message|>x<|end|>"
    theirs, ours = both(enc, enc.encode(text, allowed_special="all"))
    assert ours == theirs


def test_the_bytes_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "KEPT_TOKENS", 4)
    enc = encoding()
    text = "<|channel|>final<|message|>one two three four five six seven eight<|return|>"
    theirs, ours = both(enc, enc.encode(text, allowed_special="all"))
    assert ours == theirs
    assert 0 < len(stream.vocabulary(enc)._bytes) <= 4
