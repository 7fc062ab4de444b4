"""The request limits (`Limits`, each configurable) and the checks that bound a value
by them; every decoder of the wire applies them."""

from __future__ import annotations

from typing import Literal

import msgspec

from domain.errors import InvalidRequest


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Request limits; every one is configurable (see docs/configuration.md)."""

    max_input_items: int = 4096
    max_text_chars: int = 1_048_576  # per text part / instructions
    max_tools: int = 128
    max_tool_schema_bytes: int = 65_536
    max_output_tokens: int = 131_072
    max_metadata_pairs: int = 16
    max_metadata_key_chars: int = 64
    max_metadata_value_chars: int = 512
    # Deepest nesting of arrays and objects in a body: far inside what every reader of the
    # stored log can render back (Python's recursion limit is about 1000).
    max_json_depth: int = 128
    # The largest image or file part, as its data URL (the body limit bounds them together).
    max_file_bytes: int = 8 * 1024 * 1024
    # Hosted tools (domain.tools.HOSTED_TOOL_TYPES): accepted and not offered, or refused.
    hosted_tools: Literal["accept", "refuse"] = "accept"
    # A tool server runs gpt-oss's built-ins (`--tool-server`): the hosted tools they stand
    # for are offered, so neither refused nor recorded as not offered. Not a flag of its own.
    builtins: bool = False


def short(name: str, value: str | None, limit: int = 512) -> str | None:
    """`value`, if at most `limit` characters long (an identifier-like string)."""
    if value is not None and len(value) > limit:
        raise InvalidRequest(
            f"Invalid '{name}': string too long (max {limit} characters).",
            param=name,
            code="string_above_max_length",
        )
    return value


def check_text(param: str, text: str | None, limits: Limits) -> None:
    """A text (a part, instructions, arguments) is at most `max_text_chars` long."""
    if text is not None and len(text) > limits.max_text_chars:
        raise InvalidRequest(
            f"Invalid '{param}': string too long ({len(text)} characters; the limit is "
            f"{limits.max_text_chars}).",
            param=param,
            code="string_above_max_length",
        )


def check_size(param: str, value: object, limits: Limits) -> None:
    """A schema-like part of the request (a tool's parameters, `text.format`'s schema, the
    allowed tools) is bounded like a tool schema: each is copied into the log."""
    if value is not None and len(msgspec.json.encode(value)) > limits.max_tool_schema_bytes:
        raise InvalidRequest(
            f"Invalid '{param}': larger than {limits.max_tool_schema_bytes} bytes.",
            param=param,
            code="invalid_value",
        )
