"""The ids of the log's streams, `resp_…` and `conv_…`: the second the stream was made, as 8
hex digits, then 42 random ones (168 bits).

Why a time first: every table of the log is keyed by the stream it belongs to (`events`
by `(stream_id, position)`, `responses` and `conversations` by id, `conversation_items` by
conversation). With random ids each new stream's first rows land on a random leaf of each
of those indexes, which in a log larger than memory is a page to read, and after every
checkpoint a full page to write to the WAL (and to ship to the standby). With the time
first, the streams begun in the same minutes share the leaves at the right edge of each
index, which are in memory and already written since the checkpoint
(docs/performance.md, "Stream ids by time").

Ids stay opaque to clients, as OpenAI's are. Ids made before this scheme (48 random hex
digits) stay valid everywhere; `made_at` tells the two apart, which a partitioning of the
log by the time its streams began would need (docs/scale.md).
"""

from __future__ import annotations

import secrets

_TIME_DIGITS = 8
_RANDOM_BYTES = 21
_DIGITS = _TIME_DIGITS + 2 * _RANDOM_BYTES
_HEX = frozenset("0123456789abcdef")


def new_id(prefix: str, now: float) -> str:
    """A new stream id: `<prefix>_`, the second `now` (unix time) in 8 hex digits, and 42
    random ones."""
    return f"{prefix}_{int(now):0{_TIME_DIGITS}x}{secrets.token_hex(_RANDOM_BYTES)}"


def made_at(stream_id: str) -> int | None:
    """The unix second a stream id made by `new_id` carries; None for any other id (those of
    before, which are random, and ids of other shapes)."""
    _, sep, digits = stream_id.partition("_")
    if not sep or len(digits) != _DIGITS or not _HEX.issuperset(digits):
        return None
    return int(digits[:_TIME_DIGITS], 16)
