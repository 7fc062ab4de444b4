"""The HTTP/1.1 connection protocol `serve` runs: uvicorn's httptools protocol with limits on
what a request line and its headers may hold, and OpenAI's error shape for the requests
refused before any route sees them.

uvicorn answers a request it cannot parse (conflicting `Content-Length` and
`Transfer-Encoding`, a malformed line) with a plain-text 400, and takes a URL or headers of
any size (1 MiB of headers, 10,000 of them). Here a URL past `MAX_URL_BYTES` is 414, headers
past `MAX_HEADER_BYTES` or `MAX_HEADERS` are 431, and every such refusal, like the parse
errors, is a JSON body `{"error": {...}}` with an `x-request-id`, as every other error.
"""

from __future__ import annotations

import uuid

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Far above what any client of the API sends (ids are in paths, and query strings are short)
# and what proxies commonly allow (8-16 KiB of request line, 8-64 KiB of headers).
MAX_URL_BYTES = 16 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_HEADERS = 128

_REASONS = {400: b"Bad Request", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


class _Refused(Exception):
    """Raised from a parser callback to stop parsing; httptools then raises its parser
    error, which uvicorn answers through `send_400_response`."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's protocol, bounded, with OpenAI-shaped refusals (see the module's doc)."""

    _refusal: tuple[int, str, str] | None = None
    _header_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._refusal, self._header_bytes = None, 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > MAX_URL_BYTES:
            self._refuse(
                414, "uri_too_long", f"The request URL is longer than {MAX_URL_BYTES} bytes."
            )

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if len(self.headers) >= MAX_HEADERS:
            self._refuse(
                431, "headers_too_large", f"The request has more than {MAX_HEADERS} headers."
            )
        if self._header_bytes > MAX_HEADER_BYTES:
            self._refuse(
                431,
                "headers_too_large",
                f"The request's headers are larger than {MAX_HEADER_BYTES} bytes.",
            )
        super().on_header(name, value)

    def _refuse(self, status: int, code: str, message: str) -> None:
        self._refusal = (status, code, message)
        raise _Refused(message)

    def send_400_response(self, msg: str) -> None:
        status, code, message = self._refusal or (
            400,
            "invalid_http_request",
            "The server could not parse the HTTP request (for example, it has both "
            "Content-Length and Transfer-Encoding, or a malformed request line).",
        )
        body = msgspec.json.encode(
            {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": None,
                    "code": code,
                }
            }
        )
        head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"x-request-id: req_" + uuid.uuid4().hex.encode() + b"\r\n",
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()
