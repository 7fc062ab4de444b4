"""The OpenAI wire format: the create body's shapes (`request`), its decoding into domain
objects (`decode`) with msgspec's errors in OpenAI's words (`rejection`), and the error body
every rejection is sent in (`errors`)."""

from service.wire.decode import (
    MAX_MODEL_CHARS,
    RESPONSE_ID,
    SET_ASIDE,
    UNSUPPORTED_FIELDS,
    CreateRequest,
    Limits,
    check_response_id,
    parse_compact_body,
    parse_create_body,
    parse_input_tokens_body,
    with_client_headers,
)
from service.wire.errors import ErrorBody, ErrorDetail
from service.wire.request import CreateResponseBody

__all__ = [
    "MAX_MODEL_CHARS",
    "RESPONSE_ID",
    "SET_ASIDE",
    "UNSUPPORTED_FIELDS",
    "CreateRequest",
    "CreateResponseBody",
    "ErrorBody",
    "ErrorDetail",
    "Limits",
    "check_response_id",
    "parse_compact_body",
    "parse_create_body",
    "parse_input_tokens_body",
    "with_client_headers",
]
