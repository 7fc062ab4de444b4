"""OpenAI's error body, the shape every 4xx/5xx answer is sent in."""

from __future__ import annotations

import msgspec


class ErrorDetail(msgspec.Struct, frozen=True):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(msgspec.Struct, frozen=True):
    """OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`."""

    error: ErrorDetail
