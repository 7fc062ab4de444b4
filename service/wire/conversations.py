"""The bodies of the Conversations API (openai-python `ConversationCreateParams`,
`ConversationUpdateParams`, `ItemCreateParams`), decoded like a create's input items."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.errors import InvalidRequest
from domain.objects import InputItem, ItemReference
from service.wire.decode import Limits, _easy, _item, _metadata, _object
from service.wire.rejection import rejection
from service.wire.request import TypedItemParam


class _Strict(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


class CreateConversationBody(_Strict, frozen=True, kw_only=True):
    items: list[TypedItemParam] | None = None
    metadata: dict[str, str] | None = None


class UpdateConversationBody(_Strict, frozen=True, kw_only=True):
    metadata: dict[str, str]


class AddItemsBody(_Strict, frozen=True, kw_only=True):
    items: list[TypedItemParam]


def _decode(body: bytes, limits: Limits, kind: type[Any]) -> Any:
    raw = _object(body, limits)
    if isinstance(raw.get("items"), list):
        raw["items"] = [_easy(i) for i in raw["items"]]
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as exc:
        raise rejection(exc, raw) from exc


def _items(params: list[TypedItemParam] | None, limits: Limits) -> list[InputItem]:
    out: list[InputItem] = []
    for i, param in enumerate(params or []):
        item = _item(param, f"items[{i}]", limits)
        if isinstance(item, ItemReference):
            raise InvalidRequest(
                f"Invalid 'items[{i}]': an item reference cannot be added to a conversation.",
                param=f"items[{i}].type",
                code="invalid_value",
            )
        out.append(item)
    return out


def parse_create_conversation(
    body: bytes, limits: Limits
) -> tuple[list[InputItem], dict[str, str]]:
    parsed: CreateConversationBody = _decode(body or b"{}", limits, CreateConversationBody)
    return _items(parsed.items, limits), _metadata(parsed.metadata, limits)


def parse_update_conversation(body: bytes, limits: Limits) -> dict[str, str]:
    parsed: UpdateConversationBody = _decode(body, limits, UpdateConversationBody)
    return _metadata(parsed.metadata, limits)


def parse_add_items(body: bytes, limits: Limits) -> list[InputItem]:
    parsed: AddItemsBody = _decode(body, limits, AddItemsBody)
    return _items(parsed.items, limits)
