"""msgspec's validation errors in OpenAI's words: the one place that reads msgspec's wording
and turns it into the `InvalidRequest` (param, code, message) a client gets."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from domain.errors import InvalidRequest

# Content part kinds of OpenAI's that resplog cannot take; refused as unsupported, not invalid.
UNSUPPORTED_PARTS = ("input_audio", "input_video")
_STEP = re.compile(r"\.?([^.\[]+)|\[(\d+)\]|(\[[^\]]*\])")
_ABSENT = object()


def rejection(exc: msgspec.ValidationError, raw: dict[str, Any]) -> InvalidRequest:
    """Translate msgspec's error into OpenAI's 400; the only place that reads its wording.

    msgspec says `<what> - at `$.<path>``, where `what` is "Object contains unknown field
    `f`", "Object missing required field `f`", "Expected …" or "Invalid [enum] value …".
    Unknown and missing fields become OpenAI's `unknown_parameter` and
    `missing_required_parameter`; inside an input item `_item_rejection` words it the way
    resplog always has (quoting the offending value, looked up in `raw`, the body msgspec
    was given); anything else is passed on as "Invalid value for '<param>': <what>.".
    """
    what, _, where = str(exc).rpartition(" - at `$")
    if not what:  # no location: an error about the body itself
        what, where = str(exc), ""
    steps = _steps(where.removesuffix("`"))
    field = what.partition("`")[2].removesuffix("`")
    if what.startswith("Object contains unknown field"):
        param = _param([*steps, field])
        return InvalidRequest(
            f"Unknown parameter: '{param}'.", param=param, code="unknown_parameter"
        )
    missing = what.startswith("Object missing required field")
    if steps[:1] == ["input"] and len(steps) >= 2:
        item = _item_rejection(steps[:2], steps[2:], field if missing else None, what, raw)
        if item is not None:
            return item
    if missing:
        param = _param([*steps, field])
        return InvalidRequest(
            f"Missing required parameter: '{param}'.",
            param=param,
            code="missing_required_parameter",
        )
    at = _param(steps)
    return InvalidRequest(
        f"Invalid value for '{at}': {what}." if at else what, param=at or None, code="invalid_value"
    )


def _item_rejection(
    item: list[str | int],
    rest: list[str | int],
    missing: str | None,
    what: str,
    raw: dict[str, Any],
) -> InvalidRequest | None:
    """The wording of an error inside `input[i]`; `rest` is where in the item, `missing` the
    field msgspec found absent (if that is the error)."""
    at = [*rest, missing] if missing else rest
    param = _param([*item, *at])
    value = _value(raw, [*item, *at])
    kind = _value(raw, [*item, "type"])
    match at:
        case ["type"]:
            if value == "item_reference":
                return _bad(
                    param,
                    "item references are not supported; send the item.",
                    "unsupported_parameter",
                )
            return _bad(param, f"unsupported input item type {_repr(value)}.")
        case ["id"]:
            return _bad(param, "expected a string of 1 to 128 characters.")
        case ["role"]:
            return _bad(param, f"{_repr(value)} is not one of user, assistant, system, developer.")
        case ["summary" | "content", *_] if kind == "reasoning":
            # Said in msgspec's own words about the list, relative to it, as resplog always
            # has; a null list is read as empty, so it only ever said it expected an array.
            what = what.replace("`array | null`", "`array`")
            inner = rest[1:]  # where in the list (without a missing field's name)
            where = "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in inner)
            return _bad(_param(item), f"{what} - at `${where}`" if inner else what)
        case ["content"]:
            return _bad(param, "expected a string or an array of content parts.")
        case ["output"]:
            return _bad(param, "expected a string or an array of input_text parts.")
        case ["content" | "output", int()]:
            return _bad(param, "expected a content part object.")
        case ["content" | "output", int(), "type"]:
            if value in UNSUPPORTED_PARTS:
                return _bad(
                    param,
                    f"{value} content is not supported by this server.",
                    "unsupported_parameter",
                )
            return _bad(param, f"unsupported content part type {_repr(value)}.")
        case [*_, "call_id" | "name" | "arguments" | "text" | "refusal"]:
            if value is None or value is _ABSENT:
                return InvalidRequest(
                    f"Missing required parameter: '{param}'.",
                    param=param,
                    code="missing_required_parameter",
                )
            return _bad(param, f"expected a string, got {type(value).__name__}.")
    return None


def _steps(path: str) -> list[str | int]:
    """msgspec's path (`.input[0].content`) as steps: ["input", 0, "content"]; a dict's
    key is `[...]` in msgspec's paths and stays so."""
    return [int(i) if i else name or key for name, i, key in _STEP.findall(path)]


def _param(steps: list[str | int]) -> str:
    """Steps as OpenAI's `param`: input[0].content."""
    return "".join(
        f"[{s}]" if isinstance(s, int) else (f".{s}" if n and s[0] != "[" else s)
        for n, s in enumerate(steps)
    )


def _value(raw: object, steps: list[str | int]) -> object:
    """What the client sent at `steps`, `_ABSENT` if nothing."""
    for step in steps:
        if isinstance(raw, list) and isinstance(step, int) and step < len(raw):
            raw = raw[step]
            continue
        if not isinstance(raw, dict) or step not in raw:
            return _ABSENT
        raw = raw[step]
    return raw


def _repr(value: object) -> str:
    return repr(None if value is _ABSENT else value)


def _bad(param: str, message: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(f"Invalid '{param}': {message}", param=param, code=code)
