"""What a request's facts (`extra`) keep beside the echoed response: parameters not
echoed, hosted tools not offered, and the client headers it came with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

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
