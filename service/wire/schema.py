"""The create body's published JSON Schema (`/openapi.json`): msgspec's, with the input
items decode sets aside shown as what a client sends (their own `type`s), not as the
`set_aside` wrapper that only decode writes."""

from __future__ import annotations

from typing import Any

import msgspec

from service.wire.request import CreateResponseBody, SetAsideItemParam
from service.wire.set_aside import SET_ASIDE_TYPES

_WRAPPER = SetAsideItemParam.__name__


def create_body_components(ref_template: str = "#/$defs/{name}") -> dict[str, Any]:
    """The schemas of the create body and everything it refers to, by name."""
    (_, components) = msgspec.json.schema_components(
        [CreateResponseBody], ref_template=ref_template
    )
    ref = ref_template.format(name=_WRAPPER)
    components[_WRAPPER] = {
        "title": "SetAsideItem",
        "description": "An input item OpenAI takes that resplog keeps as sent and gives no "
        "engine (docs/clients.md).",
        "type": "object",
        "properties": {"type": {"enum": sorted(SET_ASIDE_TYPES)}},
        "required": ["type"],
        "additionalProperties": True,
    }
    for schema in components.values():
        _remap(schema, ref)
    return components


def _remap(node: Any, ref: str) -> None:
    """Every discriminator that maps `set_aside` maps the set-aside types instead."""
    if isinstance(node, dict):
        mapping = node.get("discriminator", {}).get("mapping")
        if isinstance(mapping, dict) and mapping.pop("set_aside", None) is not None:
            mapping.update(dict.fromkeys(sorted(SET_ASIDE_TYPES), ref))
        for value in node.values():
            _remap(value, ref)
    elif isinstance(node, list):
        for value in node:
            _remap(value, ref)
