"""How deeply a JSON body nests, measured on the bytes before anything decodes it.

A body nested near Python's recursion limit decodes (msgspec's decoder recurses in C) but
breaks readers with deeper stacks later: the stored log then could not be rendered back
(963 levels in a tool schema were accepted, then retrieve answered 500). So nesting is
refused at the door, well inside what every reader handles, and before any decoding.
"""

from __future__ import annotations

import re

from domain.errors import InvalidRequest

_STRUCTURE = b'"[]{}'
_OTHER = bytes(c for c in range(256) if c not in _STRUCTURE)
_EMPTY_PAIR = re.compile(rb"\[\]|\{\}")
_STRING = re.compile(rb'"[^"]*"')


def nesting_exceeds(body: bytes, limit: int) -> bool:
    """Whether `body` nests arrays and objects deeper than `limit` levels.

    All C-level passes: drop escaped backslashes and quotes, keep only quotes and brackets,
    drop string contents, then peel innermost `[]`/`{}` pairs, one level per pass. Dropping
    two adjacent quotes first is safe whichever string they belong to (quotes alternate
    open/close, and nothing lies between them) and leaves few strings for the regex.
    A body still not empty after `limit` passes is deeper than the limit (or not JSON, which
    the decoder refuses anyway).
    """
    # Fewer opening brackets than the limit cannot nest deeper: the common case is two counts.
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    if b"\\" in body:  # left to right, as a JSON reader pairs them
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = _STRING.sub(b"", body.translate(None, _OTHER).replace(b'""', b""))
    for _ in range(limit):
        peeled = _EMPTY_PAIR.sub(b"", shape)
        if not peeled or peeled == shape:
            return False
        shape = peeled
    return True


def check_nesting(body: bytes, limit: int) -> None:
    """Refuse a body nested deeper than `limit` with OpenAI's 400, before it is decoded."""
    if nesting_exceeds(body, limit):
        raise InvalidRequest(
            f"The JSON body of your request is nested more than {limit} levels deep.",
            code="invalid_json",
        )
