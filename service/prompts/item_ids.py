"""The ids a request's input items are recorded under: derived from the response id and the
item's place, so the same request always yields the same log and an `item_reference` finds
the item from its id alone (service/prompts/references.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from domain.objects import INPUT_ID_PREFIX, InputItem
from service.wire.set_aside import SET_ASIDE


def assign_ids(rid: str, items: list[InputItem]) -> list[InputItem]:
    """Give every input item an id (kept if the client sent one), derived from the
    response id so the same request always yields the same log."""
    suffix = rid.removeprefix("resp_")
    return [
        item
        if item.id
        else msgspec.structs.replace(item, id=f"{INPUT_ID_PREFIX[type(item)]}_{suffix}_in{i}")
        for i, item in enumerate(items)
    ]


def aside_ids(rid: str, extra: dict[str, Any]) -> dict[str, Any]:
    """Give every input item set aside as sent (`SET_ASIDE`) an id, if it came without
    one, the way `assign_ids` does: `input_items` lists and pages them by id."""
    aside = extra.get(SET_ASIDE)
    if not aside:
        return extra
    suffix = rid.removeprefix("resp_")
    named = [
        {
            "at": a["at"],
            "item": a["item"]
            if a["item"].get("id")
            else {"id": f"item_{suffix}_in{a['at']}", **a["item"]},
        }
        for a in aside
    ]
    return {**extra, SET_ASIDE: named}
