"""The compaction a create asks for: `context_management` and Codex CLI's
`compaction_trigger` item, checked here and acted on by service/prompts/compaction.py."""

from __future__ import annotations

from typing import Any

from domain.errors import InvalidRequest


def take_compaction_trigger(raw: dict[str, Any]) -> dict[str, Any]:
    """Codex CLI's `{"type": "compaction_trigger"}`, the last input item of a request that
    wants its conversation compacted (its answer is then one `compaction` item): taken out
    of the input and kept as a fact. Anywhere else in the input it is a 400."""
    items = raw.get("input")
    if not isinstance(items, list):
        return {}
    found = [
        i
        for i, item in enumerate(items)
        if isinstance(item, dict) and item.get("type") == "compaction_trigger"
    ]
    if not found:
        return {}
    if found != [len(items) - 1]:
        i = found[0] if found[0] != len(items) - 1 else found[1]
        raise InvalidRequest(
            f"Invalid 'input[{i}]': a compaction_trigger item must be the last input item.",
            param=f"input[{i}]",
            code="invalid_value",
        )
    raw["input"] = items[:-1]
    return {"compaction_trigger": True}


def read_context_management(value: Any) -> dict[str, Any]:
    """openai-python `ResponseCreateParams.context_management`: a list of strategies;
    `compaction` (with an optional integer `compact_threshold`) is acted on, any other
    strategy kept as sent (and so ignored)."""
    if value is None:
        return {}
    if not isinstance(value, list) or not all(
        isinstance(e, dict) and isinstance(e.get("type"), str) for e in value
    ):
        raise InvalidRequest(
            "Invalid 'context_management': expected an array of objects with a 'type'.",
            param="context_management",
            code="invalid_type",
        )
    for i, entry in enumerate(value):
        threshold = entry.get("compact_threshold")
        bad = isinstance(threshold, bool) or not isinstance(threshold, int | None)
        if entry["type"] == "compaction" and (bad or (threshold is not None and threshold < 1)):
            raise InvalidRequest(
                f"Invalid 'context_management[{i}].compact_threshold': expected a positive "
                "integer.",
                param=f"context_management[{i}].compact_threshold",
                code="invalid_value",
            )
    return {"context_management": value}
