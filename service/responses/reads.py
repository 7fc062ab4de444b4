"""Reading a response: who may see it, its object, the input items of its request, and its
events (those stored now, or a live tail). Visibility is one rule, in `visible_row`: a
response is seen only by its owner, and not after it was deleted or if it was never stored
(the index's `visible` applies it before reading the snapshot, so timing tells nothing).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Literal

import msgspec

from domain.errors import InvalidRequest, InvalidTransition, NotFound
from domain.events import RequestFacts, ResponseCreated
from domain.fold.replay import project, replay
from domain.objects import InputItem, ResponseObject
from domain.state import ResponseState
from service.audit import chain
from service.bundle import Bundle
from service.ports import Batches, ResponseRow
from service.wire.set_aside import SET_ASIDE

_snapshot = msgspec.json.Decoder(ResponseObject)
UNFINISHED = ("queued", "in_progress")


def _visible(row: ResponseRow | None, owner: str) -> ResponseRow:
    if row is None or row.deleted or not row.store or row.owner != owner:
        raise NotFound("No response found with that id.")
    return row


async def visible_row(svc: Bundle, response_id: str, owner: str) -> ResponseRow:
    """The response's row, if `owner` may see it; NotFound otherwise."""
    return _visible(await svc.index.visible(response_id, owner), owner)


async def check_visible(svc: Bundle, response_id: str, owner: str) -> None:
    """NotFound unless `owner` may see the response; its snapshot is not read."""
    _visible(await svc.index.visible(response_id, owner, snapshot=False), owner)


def snapshot(row: ResponseRow) -> ResponseObject:
    """The object as of the row's last lifecycle event (the final one once it ended)."""
    return _snapshot.decode(row.snapshot)


async def request_of(svc: Bundle, response_id: str) -> ResponseCreated:
    """The stream's first event, which carries the whole request as hidden facts."""
    first = await svc.store.read(response_id, after=-1, limit=1)
    event = first[0].event() if first else None
    if not isinstance(event, ResponseCreated) or event.facts is None:
        raise InvalidTransition(f"stream {response_id} does not start with its request")
    return event


async def load_state(svc: Bundle, response_id: str) -> ResponseState:
    return replay(e.event() for e in await svc.store.read(response_id))


async def retrieve(svc: Bundle, response_id: str, owner: str) -> ResponseObject:
    """The projection: the cached final object, or the fold of a running response's log."""
    row = await visible_row(svc, response_id, owner)
    if row.status in UNFINISHED:
        return project(await load_state(svc, response_id))
    return snapshot(row)


async def retrieve_raw(svc: Bundle, response_id: str, owner: str) -> bytes:
    """Like `retrieve`, as JSON bytes; a finished response is served from its row as is."""
    return (await retrieve_polled(svc, response_id, owner)).body


class Retrieved(msgspec.Struct, frozen=True):
    """A response as JSON bytes, and whether it has yet to end (a poller asks again)."""

    body: bytes
    unfinished: bool


async def retrieve_polled(svc: Bundle, response_id: str, owner: str) -> Retrieved:
    """`retrieve_raw`, saying whether the response has ended."""
    row = await visible_row(svc, response_id, owner)
    if row.status in UNFINISHED:
        response = project(await load_state(svc, response_id))
        return Retrieved(msgspec.json.encode(response), not response.terminal)
    return Retrieved(row.snapshot, False)


async def read_events(
    svc: Bundle, response_id: str, owner: str, *, after: int, follow: bool = True
) -> Batches:
    """The response's events after position `after`, in batches: with `follow`, a live
    tail that ends after the terminal event (what a stream of it shows); else only those
    stored now."""
    await check_visible(svc, response_id, owner)
    if follow:
        return svc.store.subscribe_batches(response_id, after)
    return stored_now(svc, response_id, after)


async def stored_now(svc: Bundle, stream_id: str, after: int) -> Batches:
    """What a stream holds after `after` now, as one batch (none if nothing)."""
    events = await svc.store.read(stream_id, after)
    if events:
        yield events


async def close_tail(tail: AsyncGenerator[Any, None]) -> None:
    """End a tail early, so the store drops its subscription now rather than when the
    tail is collected."""
    await tail.aclose()


# An input item as `input_items` lists it: a typed one, or one set aside as sent.
ListedItem = InputItem | dict[str, Any]


def _id(item: ListedItem) -> str:
    return str(item.get("id", "")) if isinstance(item, dict) else item.id


def listed_input(facts: RequestFacts) -> list[ListedItem]:
    """The items a request sent, in its order: the typed ones, and those set aside
    (`service/wire`'s `SET_ASIDE`) put back at their index."""
    items: list[ListedItem] = list(facts.input)
    for aside in facts.extra.get(SET_ASIDE, []):
        items.insert(aside["at"], aside["item"])
    return items


def _first_of_each_id(items: list[ListedItem]) -> list[ListedItem]:
    """The items, but an item whose id an earlier one already has. Create refuses two items
    with one id; a log written before it did (or imported) may hold them, and a cursor that
    names two items would bring back the same page forever."""
    seen: set[str] = set()
    kept: list[ListedItem] = []
    for item in items:
        if _id(item) not in seen:
            seen.add(_id(item))
            kept.append(item)
    return kept


class ItemPage(msgspec.Struct, frozen=True):
    # A set-aside item goes out as the bytes it was sent as (a schema's union cannot hold
    # both the item Structs and a plain dict).
    data: list[InputItem | msgspec.Raw]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


async def list_input_items(
    svc: Bundle,
    response_id: str,
    owner: str,
    *,
    after: str | None,
    limit: int,
    order: Literal["asc", "desc"],
) -> ItemPage:
    """OpenAI's cursor list of the items the request sent (its own input, not the chain)."""
    if not 1 <= limit <= 100:
        raise InvalidRequest(
            "Invalid 'limit': must be between 1 and 100.", param="limit", code="invalid_value"
        )
    await check_visible(svc, response_id, owner)
    created = await request_of(svc, response_id)
    assert created.facts is not None
    items = _first_of_each_id(listed_input(created.facts))
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [_id(i) for i in items]
        if after not in ids:
            raise InvalidRequest(
                f"Invalid 'after': no input item '{after}' in this response.",
                param="after",
                code="invalid_value",
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return ItemPage(
        data=[msgspec.Raw(msgspec.json.encode(i)) if isinstance(i, dict) else i for i in page],
        first_id=_id(page[0]) if page else None,
        last_id=_id(page[-1]) if page else None,
        has_more=len(items) > limit,
    )


async def proof(svc: Bundle, response_id: str, owner: str) -> chain.Proof:
    """The inclusion proof of the owner's response in the latest checkpoint (the owner
    checks that the log holds its response as it was when the checkpoint was signed)."""
    await check_visible(svc, response_id, owner)
    return await chain.prove(svc.audit.ledger, response_id)
