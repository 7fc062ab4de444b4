"""The tags msgspec's tagged unions need, written into the raw body before it is read:
a message's omitted `type`, and the `hosted` and `set_aside` wrappers."""

from __future__ import annotations

from typing import Any

from domain.errors import InvalidRequest
from domain.tools import HOSTED_TOOL_TYPES
from service.wire.set_aside import SET_ASIDE_TYPES


def wrap_hosted(raw: dict[str, Any]) -> dict[str, Any]:
    """Put each hosted tool (`web_search`, ...) under the `hosted` tag, as sent, so that
    msgspec reads every tool kind through one tagged union."""
    return wrap(raw, "tools", HOSTED_TOOL_TYPES, ("hosted", "tool"))


def wrap_set_aside(raw: dict[str, Any]) -> dict[str, Any]:
    """Put each input item of a kind in `SET_ASIDE_TYPES` under the `set_aside` tag, as
    sent, in its place (so that errors about the other items keep their index)."""
    return wrap(raw, "input", SET_ASIDE_TYPES, ("set_aside", "item"))


def wrap(
    raw: dict[str, Any], field: str, kinds: frozenset[str], wrapper: tuple[str, str]
) -> dict[str, Any]:
    """Each element of the list `raw[field]` whose `type` is one of `kinds`, as
    `{"type": tag, key: element}`. The tag is resplog's own word, never a client's."""
    elements = raw.get(field)
    if not isinstance(elements, list):
        return raw
    tag, key = wrapper
    wrapped = []
    for i, element in enumerate(elements):
        kind = element.get("type") if isinstance(element, dict) else None
        if kind == tag:
            raise InvalidRequest(
                f"Invalid value for '{field}[{i}].type': Invalid value '{tag}'.",
                param=f"{field}[{i}].type",
                code="invalid_value",
            )
        inside = isinstance(kind, str) and kind in kinds
        wrapped.append({"type": tag, key: element} if inside else element)
    return {**raw, field: wrapped}


def tag_easy_messages(raw: dict[str, Any]) -> dict[str, Any]:
    """Give `type: "message"` to input items without a `type` (`item_reference` to one that
    is only an id).

    OpenAI lets a message omit its type (openai-python `EasyInputMessageParam`), but a
    msgspec tagged union needs the tag to pick a Struct, so it is filled in here; nothing
    else is touched, and msgspec does all the validating.
    """
    items = raw.get("input")
    if not isinstance(items, list):
        return raw
    return {**raw, "input": [easy(item) for item in items]}


def easy(item: object) -> object:
    """An input item without a `type`, given the one its shape implies."""
    if not isinstance(item, dict) or "type" in item:
        return item
    if "role" in item:
        return {"type": "message", **item}
    # openai-python `ItemReference` may omit its type too: an item that is only an id.
    return {"type": "item_reference", **item} if set(item) == {"id"} else item
