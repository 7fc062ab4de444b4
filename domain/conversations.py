"""A conversation (OpenAI's Conversations API) as the log keeps it: its own stream of events
(`conv_…`), whose items are what a response that names the conversation sees before its own
input, and to which every such response adds its input and output items when it ends.

Events are plain facts; they never reach a client as they are (the API serves the read
model: the conversation object and its items).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from domain.objects import InputItem, SetAsideItem

MAX_ITEMS_PER_REQUEST = 20  # OpenAI's limit on `items` of a create or an items append

# What a conversation holds: input items, and items of kinds no engine is given, set aside.
ConversationItem = InputItem | SetAsideItem


class ConversationObject(msgspec.Struct, frozen=True, kw_only=True):
    """openai-python `Conversation`."""

    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


class ConversationDeleted(msgspec.Struct, frozen=True, kw_only=True):
    """openai-python `ConversationDeletedResource`."""

    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    sequence_number: int


class Created(_Event, frozen=True, kw_only=True, tag="conversation.created"):
    conversation: ConversationObject
    owner: str


class ItemsAdded(_Event, frozen=True, kw_only=True, tag="conversation.items.added"):
    """Items joined the conversation: from a request (`response_id` None) or a response
    that named it and ended."""

    items: list[ConversationItem]
    response_id: str | None = None


class ItemDeleted(_Event, frozen=True, kw_only=True, tag="conversation.item.deleted"):
    item_id: str


class Updated(_Event, frozen=True, kw_only=True, tag="conversation.updated"):
    metadata: dict[str, str]


class Removed(_Event, frozen=True, kw_only=True, tag="conversation.deleted"):
    pass


ConversationEvent = Created | ItemsAdded | ItemDeleted | Updated | Removed
