"""What a request's facts (`extra`) keep beside the echoed response: parameters not
echoed, hosted tools not offered, and the client headers it came with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from domain.errors import InvalidRequest
from domain.tools import not_offered
from service.wire.create_request import CreateRequest
from service.wire.limits import Limits, check_size
from service.wire.request import CreateResponseBody


def extra_facts(
    p: CreateResponseBody, tools: list[dict[str, Any]], limits: Limits
) -> dict[str, Any]:
    """What the request's facts keep for audit beside the echoed response: parameters not
    echoed, and the hosted tools the model was not offered."""
    check_size("client_metadata", p.client_metadata, limits)
    check_size("stream_options", p.stream_options, limits)
    _check_obfuscation(p.stream_options)
    return {
        k: v
        for k, v in (
            ("stream_options", p.stream_options),
            ("prompt_cache_retention", p.prompt_cache_retention),
            ("client_metadata", p.client_metadata),
            ("tools_not_offered", not_offered(tools, builtins=limits.builtins) or None),
        )
        if v is not None
    }


def _check_obfuscation(options: dict[str, Any] | None) -> None:
    value = (options or {}).get("include_obfuscation")
    if value is not None and not isinstance(value, bool):
        raise InvalidRequest(
            "Invalid type for 'stream_options.include_obfuscation': expected a boolean.",
            param="stream_options.include_obfuscation",
            code="invalid_type",
        )


def obfuscated(req: CreateRequest) -> bool:
    """Whether the request's stream carries OpenAI's `obfuscation` pads (adapters/http/sse.py
    `OBFUSCATED`): yes unless `stream_options.include_obfuscation` is false, as OpenAI's."""
    return (req.extra.get("stream_options") or {}).get("include_obfuscation") is not False


# Request headers agent clients send that say which session or thread a request belongs to
# (Codex CLI: `session-id`, `thread-id`, `originator`): kept in the facts for the audit view.
CLIENT_HEADERS = ("session-id", "thread-id", "originator")
MAX_HEADER_FACT_CHARS = 256


def with_client_headers(req: CreateRequest, headers: Mapping[str, str]) -> CreateRequest:
    """The request with the client headers it came with recorded in its facts (cut to
    `MAX_HEADER_FACT_CHARS`); a header is never a reason to refuse a request."""
    found = {
        name: headers[name][:MAX_HEADER_FACT_CHARS] for name in CLIENT_HEADERS if name in headers
    }
    if not found:
        return req
    return msgspec.structs.replace(req, extra={**req.extra, "client_headers": found})
