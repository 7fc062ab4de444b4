"""The Conversations API routes (`/v1/conversations…`): one use-case each, in
service/conversations/api.py; shapes as openai-python's `client.conversations` sends and
parses them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, delete, get, post
from litestar.params import Parameter
from litestar.response import Stream

from adapters.http import sse
from adapters.http.routes import ERRORS, JSONL, _after, _open_stream, _stream, json_body, owner_of
from adapters.http.sse import frames
from domain.conversations import ConversationDeleted, ConversationItem, ConversationObject
from domain.errors import InvalidRequest
from domain.objects import InputItem, SetAsideItem
from service.access.admission import Access
from service.bundle import Bundle
from service.conversations import api as conversations
from service.responses.reads import ItemPage
from service.settings import Settings
from service.wire.conversations import (
    parse_add_items,
    parse_create_conversation,
    parse_update_conversation,
)
from service.wire.ids import CONVERSATION_ID, check_conversation_id

ConvId = Annotated[
    str, Parameter(description="A conversation id, `conv_…`", pattern=CONVERSATION_ID)
]


def _listed(item: ConversationItem) -> InputItem | msgspec.Raw:
    """An item as the API lists it: a set-aside one as sent, with its id."""
    if isinstance(item, SetAsideItem):
        return msgspec.Raw(msgspec.json.encode(item.listed()))
    return item


def _page(items: list[ConversationItem], has_more: bool) -> ItemPage:
    return ItemPage(
        data=[_listed(i) for i in items],
        first_id=items[0].id if items else None,
        last_id=items[-1].id if items else None,
        has_more=has_more,
    )


@post("/v1/conversations", status_code=200, responses=ERRORS, summary="Create a conversation")
async def create_conversation(
    request: Request[Any, Any, Any], bundle: Bundle, settings: Settings
) -> ConversationObject:
    items, metadata = parse_create_conversation(await json_body(request), settings.limits)
    return await conversations.create_conversation(bundle, items, metadata, owner_of(request))


@get("/v1/conversations/{conversation_id:str}", responses=ERRORS, summary="Retrieve one")
async def retrieve_conversation(
    request: Request[Any, Any, Any], bundle: Bundle, conversation_id: ConvId
) -> ConversationObject:
    check_conversation_id(conversation_id)
    return await conversations.retrieve(bundle, conversation_id, owner_of(request))


@post(
    "/v1/conversations/{conversation_id:str}",
    status_code=200,
    responses=ERRORS,
    summary="Update a conversation's metadata",
)
async def update_conversation(
    request: Request[Any, Any, Any], bundle: Bundle, settings: Settings, conversation_id: ConvId
) -> ConversationObject:
    check_conversation_id(conversation_id)
    metadata = parse_update_conversation(await json_body(request), settings.limits)
    return await conversations.update(bundle, conversation_id, metadata, owner_of(request))


@delete(
    "/v1/conversations/{conversation_id:str}",
    status_code=200,
    responses=ERRORS,
    summary="Delete a conversation (its log is kept)",
)
async def delete_conversation(
    request: Request[Any, Any, Any], bundle: Bundle, conversation_id: ConvId
) -> ConversationDeleted:
    check_conversation_id(conversation_id)
    return await conversations.delete(bundle, conversation_id, owner_of(request))


@post(
    "/v1/conversations/{conversation_id:str}/items",
    status_code=200,
    responses=ERRORS,
    summary="Add items to a conversation",
)
async def add_items(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    settings: Settings,
    conversation_id: ConvId,
    include: list[str] | None = None,
) -> ItemPage:
    check_conversation_id(conversation_id)
    items = parse_add_items(await json_body(request), settings.limits)
    added = await conversations.add_items(bundle, conversation_id, items, owner_of(request))
    return _page(added, False)


@get(
    "/v1/conversations/{conversation_id:str}/items",
    responses=ERRORS,
    summary="List a conversation's items",
)
async def list_items(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    conversation_id: ConvId,
    after: str | None = None,
    limit: int = 20,
    order: Literal["asc", "desc"] = "desc",
    include: list[str] | None = None,
) -> ItemPage:
    check_conversation_id(conversation_id)
    if not 1 <= limit <= 100:
        raise InvalidRequest(
            "Invalid 'limit': must be between 1 and 100.", param="limit", code="invalid_value"
        )
    page = await conversations.list_items(
        bundle, conversation_id, owner_of(request), after=after, limit=limit, order=order
    )
    return _page(page.items, page.has_more)


@get(
    "/v1/conversations/{conversation_id:str}/items/{item_id:str}",
    responses=ERRORS,
    summary="Retrieve one item of a conversation",
)
async def get_item(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    conversation_id: ConvId,
    item_id: str,
    include: list[str] | None = None,
) -> InputItem | msgspec.Raw:
    check_conversation_id(conversation_id)
    item = await conversations.get_item(bundle, conversation_id, item_id, owner_of(request))
    return _listed(item)


@delete(
    "/v1/conversations/{conversation_id:str}/items/{item_id:str}",
    status_code=200,
    responses=ERRORS,
    summary="Delete an item (hidden from lists and later prompts; the log keeps it)",
)
async def delete_item(
    request: Request[Any, Any, Any], bundle: Bundle, conversation_id: ConvId, item_id: str
) -> ConversationObject:
    check_conversation_id(conversation_id)
    return await conversations.delete_item(bundle, conversation_id, item_id, owner_of(request))


@get(
    "/v1/conversations/{conversation_id:str}/events",
    responses=ERRORS,
    summary="Replay a conversation's own log (SSE or JSON Lines), live-tailing",
)
async def conversation_events(
    request: Request[Any, Any, Any],
    bundle: Bundle,
    settings: Settings,
    access: Access,
    conversation_id: ConvId,
    starting_after: str | None = None,
    format: Literal["sse", "jsonl"] | None = None,
    follow: bool = True,
) -> Stream:
    check_conversation_id(conversation_id)
    events = await conversations.read_events(
        bundle, conversation_id, owner_of(request), after=_after(starting_after), follow=follow
    )
    jsonl = format == "jsonl" or (format is None and JSONL in request.headers.get("accept", ""))
    slot = _open_stream(request, access)
    if jsonl:
        return _stream(frames(events, keepalive_s=None, framing=sse.JSONL, done=None), slot, JSONL)
    return _stream(frames(events, keepalive_s=settings.keepalive_s, framing=sse.SSE), slot)


ROUTES = [
    create_conversation,
    retrieve_conversation,
    update_conversation,
    delete_conversation,
    add_items,
    list_items,
    get_item,
    delete_item,
    conversation_events,
]
