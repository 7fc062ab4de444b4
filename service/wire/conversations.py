"""The bodies of the Conversations API (openai-python `ConversationCreateParams`,
`ConversationUpdateParams`, `ItemCreateParams`), decoded like a create's input items; an item
of a kind no engine is given (`SET_ASIDE_TYPES`) is kept as sent (`SetAsideItem`)."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.conversations import ConversationItem
from domain.errors import InvalidRequest
from domain.objects import ItemReference, SetAsideItem
from service.wire.body import read_metadata
from service.wire.decode import read_object
from service.wire.items import read_item
from service.wire.limits import Limits, short
from service.wire.rejection import rejection
from service.wire.request import InputItemParam, SetAsideItemParam
from service.wire.set_aside import SET_ASIDE_TYPES
from service.wire.tags import easy, wrap


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class CreateConversationBody(_Strict, frozen=True, kw_only=True):
    items: list[InputItemParam] | None = None
    metadata: dict[str, str] | None = None
    # openai-python `ConversationCreateParams`; accepted and not kept, as on a create.
    safety_identifier: str | None = None


class UpdateConversationBody(_Strict, frozen=True, kw_only=True):
    metadata: dict[str, str]


class AddItemsBody(_Strict, frozen=True, kw_only=True):
    items: list[InputItemParam]


def _decode(body: bytes, limits: Limits, kind: type[Any]) -> Any:
    raw = read_object(body, limits)
    if isinstance(raw.get("items"), list):
        raw["items"] = [easy(i) for i in raw["items"]]
        raw = wrap(raw, "items", SET_ASIDE_TYPES, ("set_aside", "item"))
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise rejection(exc, raw) from exc


def _items(
    params: list[InputItemParam] | None, limits: Limits
) -> list[ConversationItem | ItemReference]:
    """The items as sent; an `item_reference` stays one, for the use-case to resolve
    (service/prompts/references.py `conversation_items_of`)."""
    out: list[ConversationItem | ItemReference] = []
    for i, param in enumerate(params or []):
        if isinstance(param, SetAsideItemParam):
            out.append(_set_aside(param.item, f"items[{i}]"))
        else:
            out.append(read_item(param, f"items[{i}]", limits))
    return out


def _set_aside(item: dict[str, Any], param: str) -> SetAsideItem:
    """An item of a set-aside kind, as sent; its `id`, if given, names it as any item's."""
    iid = item.get("id")
    if iid is not None and not (isinstance(iid, str) and iid):
        raise InvalidRequest(
            f"Invalid '{param}.id': expected a non-empty string.",
            param=f"{param}.id",
            code="invalid_type",
        )
    short(f"{param}.id", iid, 128)
    return SetAsideItem.of(item)


def parse_create_conversation(
    body: bytes, limits: Limits
) -> tuple[list[ConversationItem | ItemReference], dict[str, str]]:
    parsed: CreateConversationBody = _decode(body or b"{}", limits, CreateConversationBody)
    return _items(parsed.items, limits), read_metadata(parsed.metadata, limits)


def parse_update_conversation(body: bytes, limits: Limits) -> dict[str, str]:
    parsed: UpdateConversationBody = _decode(body, limits, UpdateConversationBody)
    return read_metadata(parsed.metadata, limits)


def parse_add_items(body: bytes, limits: Limits) -> list[ConversationItem | ItemReference]:
    parsed: AddItemsBody = _decode(body, limits, AddItemsBody)
    return _items(parsed.items, limits)
