"""`CreateRequest`: a create body decoded into domain terms, the response it starts and
what the response does not echo; what every decoder of a create-like body returns."""

from __future__ import annotations

from typing import Any

import msgspec

from domain.objects import InputItem, ItemReference, ResponseObject


class CreateRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A validated create request in domain terms: the response it starts (its id and
    creation time are left for the use-case to give) and what the response does not echo.

    Input item ids are "" unless the client sent one; the use-case, which knows the
    response id, assigns the others.
    """

    response: ResponseObject
    input: list[InputItem | ItemReference]  # references are resolved by the use-case
    stream: bool
    include: list[str]
    extra: dict[str, Any]  # parameters kept verbatim for audit (e.g. `stream_options`)
    # Each `mcp` server's headers (its `authorization` as a bearer header among them), by
    # label: secrets, never stored as sent (service/tools/mcploop.py seals them).
    secrets: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    # False: record the response and complete it with no output, the engine never asked (a
    # WebSocket `response.create` with `generate: false`, OpenAI's warm-up; docs/websocket.md).
    generate: bool = True

    @property
    def background(self) -> bool:
        return self.response.background
