"""openai-harmony's streaming parser, for the part of it that `HarmonyParser` reads: each
message's header (its channel, recipient and content type, at `<|message|>`) and the text
each content token adds.

Why not harmony's own `StreamableParser`: it encodes a formatting token (`<|start|>`,
`<|message|>`) afresh for every token of a header it reads, and its stop tokens for every
parser made, each time building the set of the encoding's thousand special tokens again. A
header token costs 27 µs there and a parser 77 µs to make, where a token of content costs
about 1 µs; so a generation of an analysis and a final message spent some 300 µs in it
(docs/performance.md, "The harmony rendering and parser"). Here the formatting tokens' ids
are found once per encoding.

What it does is openai-harmony 0.0.8's `StreamableParser` in strict mode (its
`src/encoding.rs`: `process_next`, `parse_header_from_string`), step for step, including
its errors (raised as its `HarmonyError`) and its decoding of a character split across
tokens (held until whole; an invalid byte sequence becomes U+FFFD, one a token).
`tests/unit/engines/test_harmony_stream.py` runs both on the same tokens.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from openai_harmony import HarmonyError

from adapters.engines.harmony.encoding import special_token

_REPLACEMENT = "\ufffd"
_ROLES = frozenset({"user", "assistant", "system", "developer", "tool"})
_CHANNEL = "<|channel|>"
_CONSTRAIN = "<|constrain|>"
# Rust's `char::is_whitespace` (Unicode White_Space), which `trim` and the channel's end
# use; Python's `str.isspace` also counts U+001C-U+001F, so it is not used.
_WHITE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_CHANNEL_END = re.compile("[" + re.escape(_WHITE) + "<]")
# Rust's `split_ascii_whitespace`: space, tab, line feed, form feed, carriage return.
_ASCII_WHITE = re.compile("[ \t\n\x0c\r]+")


# The most tokens whose bytes are kept (a few MiB): a model's answers use far fewer of the
# vocabulary's 200,000, and decoding one again costs about half a microsecond.
KEPT_TOKENS = 65_536


class Vocabulary:
    """What the parser needs of an encoding, found once: the ids of `<|start|>` and
    `<|message|>`, the stop tokens, and each token's bytes as they are first met."""

    def __init__(self, encoding: Any) -> None:
        self.encoding = encoding
        self.start = special_token(encoding, "<|start|>")
        self.message = special_token(encoding, "<|message|>")
        self.stops = frozenset(int(t) for t in encoding.stop_tokens())
        self._bytes: dict[int, bytes] = {}

    def token_bytes(self, token: int) -> bytes:
        """The token's bytes (a piece of UTF-8, not always a whole character); raises for
        an id the vocabulary does not have."""
        found = self._bytes.get(token)
        if found is None:
            if len(self._bytes) >= KEPT_TOKENS:
                self._bytes.clear()
            text = self.encoding.decode([token], errors="surrogateescape")
            found = self._bytes[token] = text.encode("utf-8", "surrogateescape")
        return found


@functools.cache
def vocabulary(encoding: Any) -> Vocabulary:
    return Vocabulary(encoding)


class HarmonyStream:
    """Reads an assistant's completion token by token (the prompt ended in
    `<|start|>assistant`, so the first header's role is the assistant's)."""

    def __init__(self, encoding: Any) -> None:
        self._vocab = vocabulary(encoding)
        self._state = "header"  # "expect_start", "header" or "content"
        self._role: str | None = "assistant"  # the next header's role, when known
        self._header: list[int] = []
        self._pending_tokens: list[int] = []  # content tokens whose bytes are not decoded
        self._pending_bytes = b""  # decoded bytes that are not yet whole characters
        self.current_channel: str | None = None
        self.current_recipient: str | None = None
        self.current_content_type: str | None = None
        self.last_content_delta: str | None = None

    def process(self, token: int) -> None:
        vocab = self._vocab
        if self._state == "expect_start":
            if token != vocab.start:
                raise HarmonyError(
                    f"Unexpected token {token} while expecting start token {vocab.start}"
                )
            self._state, self._header = "header", []
        elif self._state == "header":
            if token == vocab.message:
                self._read_header()
            else:
                self._header.append(token)
        elif token in vocab.stops:
            self._state, self.last_content_delta = "expect_start", None
            self._pending_tokens, self._pending_bytes = [], b""
            self.current_channel = self.current_recipient = self.current_content_type = None
        else:
            self._content(token)

    def _read_header(self) -> None:
        try:
            text = b"".join(self._vocab.token_bytes(t) for t in self._header).decode()
        except Exception as e:  # an id with no bytes, or bytes that are not UTF-8
            raise HarmonyError(f"could not decode header: {e}") from e
        self.current_channel, self.current_recipient, self.current_content_type = _header(
            text, self._role
        )
        self._role, self._state = None, "content"

    def _content(self, token: int) -> None:
        self._pending_tokens.append(token)
        try:
            data = b"".join(self._vocab.token_bytes(t) for t in self._pending_tokens)
        except Exception:  # an id with no bytes: wait for the next token, as harmony does
            self.last_content_delta = None
            return
        self._pending_tokens = []
        buffer = self._pending_bytes + data
        try:
            self.last_content_delta = buffer.decode()
            self._pending_bytes = b""
            return
        except UnicodeDecodeError as e:
            valid, bad = e.start, (e.end - e.start if e.reason != "unexpected end of data" else 0)
        delta = buffer[:valid].decode()
        if bad:
            delta += _REPLACEMENT
        self._pending_bytes = buffer[valid + bad :]
        self.last_content_delta = delta or None


def _header(text: str, role: str | None) -> tuple[str | None, str | None, str | None]:
    """A header's channel, recipient and content type (harmony's `parse_header_from_string`
    with `parse_recipient_and_type`, and no words left over)."""
    channel = None
    at = text.find(_CHANNEL)
    if at >= 0:
        after = text[at + len(_CHANNEL) :]
        end = _CHANNEL_END.search(after)
        value = after[: end.start()] if end else after
        if not value:
            raise HarmonyError("channel marker present but no channel value found in header")
        channel = value
        text = text[:at] + after[len(value) :]
    text = text.strip(_WHITE)
    if _CONSTRAIN in text:
        text = text.replace(_CONSTRAIN, " " + _CONSTRAIN).strip(_WHITE)
    parts = [p for p in _ASCII_WHITE.split(text) if p]
    if role is None:
        if not parts:
            raise HarmonyError("message header did not contain a role")
        if parts[0] in _ROLES:
            role = parts[0]
        elif len(parts) > 1 or parts[0].startswith("to="):
            parts.pop(0)
            role = "tool"
        else:
            raise HarmonyError(f"Unknown role: {parts[0]}")
    if parts and parts[0] == role:
        parts.pop(0)
    recipient = content_type = None
    if parts:
        count, last = len(parts), parts.pop()
        if last.startswith("to="):
            recipient = last[3:]
        elif count == 1:
            recipient = last
        else:
            content_type = last
            if parts:
                raw = parts.pop()
                recipient = raw[3:] if raw.startswith("to=") else raw
    if parts:
        raise HarmonyError(f"unexpected tokens remaining in message header: {' '.join(parts)!r}")
    return channel, recipient, content_type
