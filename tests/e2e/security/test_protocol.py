"""What is refused before any route sees it: requests the HTTP parser cannot take, URLs and
headers past their limits, bodies that are not JSON. Each answer is OpenAI's error shape
with an `x-request-id`, the server stays up, and nothing is written."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from adapters.cli.protocol import MAX_HEADER_BYTES, MAX_HEADERS, MAX_URL_BYTES
from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import launch, log_state


@pytest.fixture(scope="module")
def plain(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    srv = launch(request, tmp_path_factory, "sqlite")
    yield srv
    stop_server(srv)


def raw(server: Server, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send bytes as they are; the status, headers and body of the answer."""
    host, port = server.base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


BODY = b'{"model": "scripted", "input": "x"}'
CASES = {
    "content-length and transfer-encoding": (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n%s" % (len(BODY), BODY),
        400,
        "invalid_http_request",
    ),
    "a malformed request line": (b"GET /v1/models HTTP/9\r\n\r\n", 400, "invalid_http_request"),
    "a URL past the limit": (
        b"GET /v1/models?pad=" + b"x" * (MAX_URL_BYTES + 1) + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        414,
        "uri_too_long",
    ),
    "headers past the byte limit": (
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: "
        + b"x" * (MAX_HEADER_BYTES + 1)
        + b"\r\n\r\n",
        431,
        "headers_too_large",
    ),
    "too many headers": (
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-H%d: 1\r\n" % i for i in range(MAX_HEADERS + 1))
        + b"\r\n",
        431,
        "headers_too_large",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_protocol_refusals_are_openai_errors_and_the_server_stays_up(
    plain: Server, case: str
) -> None:
    request, status, code = CASES[case]
    before = log_state(plain)
    got, headers, body = raw(plain, request)
    assert got == status, body
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"].startswith("req_")
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == ("invalid_request_error", code)
    assert log_state(plain) == before
    with httpx.Client(base_url=plain.base_url) as client:
        assert client.get("/v1/models").status_code == 200


def test_requests_just_inside_the_limits_are_served(plain: Server) -> None:
    with httpx.Client(base_url=plain.base_url) as client:
        many = {f"x-h{i}": "1" for i in range(MAX_HEADERS - 10)}
        assert client.get("/v1/models", headers=many).status_code == 200
        big = {"x-pad": "x" * (MAX_HEADER_BYTES // 2)}
        assert client.get("/v1/models", headers=big).status_code == 200


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_a_body_declared_as_anything_but_json_is_refused_in_openai_words(
    plain: Server, content_type: str
) -> None:
    before = log_state(plain)
    with httpx.Client(base_url=plain.base_url) as client:
        answer = client.post("/v1/responses", content=BODY, headers={"content-type": content_type})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "unsupported_content_type"
    assert error["message"].startswith(f"Unsupported content type: '{content_type}'.")
    assert log_state(plain) == before


@pytest.mark.parametrize(
    "content_type", [None, "application/json; charset=utf-8", "Application/JSON"]
)
def test_json_with_parameters_or_no_content_type_is_read_as_json(
    plain: Server, content_type: str | None
) -> None:
    header = b"" if content_type is None else b"Content-Type: %s\r\n" % content_type.encode()
    request = (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s"
        b"Content-Length: %d\r\n\r\n%s" % (header, len(BODY), BODY)
    )
    status, _, body = raw(plain, request)
    assert status == 200, body
    assert json.loads(body)["status"] == "completed"
