"""The OpenAI wire format: the create body's shapes (`request`), its decoding into domain
objects (`decode`, one module per part of the body) with msgspec's errors in OpenAI's words
(`rejection`), and the error body every rejection is sent in (`errors`)."""

from service.wire.body import MAX_MODEL_CHARS
from service.wire.create_request import CreateRequest
from service.wire.decode import parse_compact_body, parse_create_body, parse_input_tokens_body
from service.wire.errors import ErrorBody, ErrorDetail
from service.wire.extras import with_client_headers
from service.wire.ids import RESPONSE_ID, check_response_id
from service.wire.limits import Limits
from service.wire.request import CreateResponseBody
from service.wire.set_aside import SET_ASIDE
from service.wire.unsupported import UNSUPPORTED_FIELDS

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
