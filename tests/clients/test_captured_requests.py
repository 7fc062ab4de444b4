"""Every request the agent clients sent (tests/fixtures/clients/, captured by the client
tests with RESPLOG_CAPTURE=1) replayed, in order and with its headers, to a real server on
the same engine: each one is accepted and the log verifies. Needs no Node: it keeps the
clients' shapes under test where the clients themselves are not installed.

The ids a later request refers to (`item_reference`, `previous_response_id`, call ids) are
mapped to the replay's: resplog's ids all carry their response's id (`resp_<hex>`,
`rs_<hex>_0`, `call_<hex>_1`), so the captured hex is replaced by the replayed one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.clients.conftest import FIXTURES, ClientServer

CAPTURES = sorted(FIXTURES.glob("*.json"))
SKIP_HEADERS = {"accept-encoding", "user-agent"}


def replayed(body: Any, ids: dict[str, str]) -> Any:
    """The body with each captured response's hex replaced by its replay's."""
    text = json.dumps(body)
    for old, new in ids.items():
        text = text.replace(old, new)
    return json.loads(text)


def answered(response: httpx.Response) -> dict[str, Any]:
    """The response object, from JSON or the last SSE event that carries it."""
    if not response.headers["content-type"].startswith("text/event-stream"):
        return dict(response.json())
    last: dict[str, Any] = {}
    for line in response.text.splitlines():
        if line.startswith("data: ") and '"response"' in line:
            last = json.loads(line.removeprefix("data: "))["response"]
    return last


@pytest.mark.parametrize("capture", CAPTURES, ids=[p.stem for p in CAPTURES])
def test_a_captured_client_conversation_is_accepted(
    capture: Path, serve_for_clients: Callable[[str], ClientServer]
) -> None:
    requests = json.loads(capture.read_text())
    ids: dict[str, str] = {}
    srv: ClientServer | None = None
    with httpx.Client(timeout=60) as http:
        for n, sent in enumerate(requests):
            srv = serve_for_clients(sent["body"]["model"])
            headers = {k: v for k, v in sent["headers"].items() if k not in SKIP_HEADERS}
            got = http.post(
                f"{srv.base_url}{sent['path'].removeprefix('/v1')}",
                json=replayed(sent["body"], ids),
                headers=headers,
            )
            assert got.status_code == 200, (n, got.text)
            response = answered(got)
            assert response["status"] == "completed", response.get("error")
            output = [item["id"] for item in response["output"]]
            old, new = sent["response_id"].removeprefix("resp_"), response["id"][len("resp_") :]
            assert output == [i.replace(old, new) for i in sent["output_ids"]]
            ids[old] = new
    assert srv is not None and srv.verify()["ok"] is True
