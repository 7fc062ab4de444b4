"""Owner isolation: another owner's key gets 404 from every endpoint (exactly as for an id
that does not exist, so ids do not leak) and writes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Server
from tests.e2e.security.conftest import http, log_state, sdk

SLOW = {"scripted_delay_ms": "20", "scripted_tokens": "2000"}


def bob_requests(rid: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every way to reach a response by its id."""
    prev = {"model": "scripted", "input": "mine now?", "previous_response_id": rid}
    return [
        ("GET", f"/v1/responses/{rid}", {}),
        ("GET", f"/v1/responses/{rid}", {"params": {"stream": "true"}}),
        ("GET", f"/v1/responses/{rid}", {"params": {"stream": "true", "starting_after": 2}}),
        ("GET", f"/v1/responses/{rid}/events", {}),
        ("GET", f"/v1/responses/{rid}/events", {"params": {"format": "jsonl", "follow": "false"}}),
        ("GET", f"/v1/responses/{rid}/input_items", {}),
        ("POST", f"/v1/responses/{rid}/cancel", {}),
        ("DELETE", f"/v1/responses/{rid}", {}),
        ("POST", "/v1/responses", {"json": prev}),
        ("POST", "/v1/responses", {"json": {**prev, "stream": True}}),
        ("POST", "/v1/responses", {"json": {**prev, "background": True}}),
    ]


@pytest.fixture
def alice(keyed: Server, key_of: Callable[[str], str]) -> Iterator[dict[str, str]]:
    """Alice's responses: finished, finished in the background, and running."""
    key = key_of("alice")
    with sdk(keyed, key) as client:
        done = client.responses.create(model="scripted", input=[{"role": "user", "content": "a"}])
        bg = client.responses.create(model="scripted", input="b", background=True)
        while client.responses.retrieve(bg.id).status != "completed":
            time.sleep(0.02)
        running = client.responses.create(
            model="scripted", input="c", background=True, metadata=SLOW
        )
        yield {"key": key, "done": done.id, "bg": bg.id, "running": running.id}
        client.responses.cancel(running.id)


def test_another_owner_gets_404_everywhere_and_writes_nothing(
    keyed: Server, key_of: Callable[[str], str], alice: dict[str, str]
) -> None:
    missing = "resp_" + "0" * 48
    with http(keyed, key_of("bob")) as bob:
        expected = {
            (method, path.replace(missing, "ID"), str(kw)): bob.request(method, path, **kw)
            for method, path, kw in bob_requests(missing)
        }
        for which in ("done", "bg", "running"):
            rid = alice[which]
            for method, path, kw in bob_requests(rid):
                before = log_state(keyed, running=alice["running"])
                answer = bob.request(method, path, **kw)
                assert answer.status_code == 404, (which, method, path, kw, answer.text)
                assert log_state(keyed, running=alice["running"]) == before, (which, path, kw)
                # The same answer as for an id that was never created, but for the id itself.
                same = expected[(method, path.replace(rid, "ID"), str(kw).replace(rid, missing))]
                assert answer.json() == _swap(same, missing, rid)
    with http(keyed, alice["key"]) as own:
        for which in ("done", "bg", "running"):
            assert own.get(f"/v1/responses/{alice[which]}").status_code == 200
        assert own.get(f"/v1/responses/{alice['running']}").json()["status"] in (
            "queued",
            "in_progress",
        )


def _swap(response: httpx.Response, old: str, new: str) -> Any:
    error = response.json()
    error["error"]["message"] = error["error"]["message"].replace(old, new)
    return error


def test_the_owner_reaches_every_endpoint_of_its_own_response(
    keyed: Server, alice: dict[str, str]
) -> None:
    """The other side of the matrix: the same requests succeed for the owner."""
    with http(keyed, alice["key"]) as own:
        for method, path, kw in bob_requests(alice["done"])[:6]:
            assert own.request(method, path, **kw).status_code == 200, (method, path, kw)
        chained = own.post(
            "/v1/responses",
            json={"model": "scripted", "input": "x", "previous_response_id": alice["done"]},
        )
        assert chained.status_code == 200
        assert own.post(f"/v1/responses/{alice['bg']}/cancel").json()["status"] == "completed"
        assert own.delete(f"/v1/responses/{alice['bg']}").json()["deleted"] is True


def test_another_owners_items_cannot_be_referenced(
    keyed: Server, key_of: Callable[[str], str], alice: dict[str, str]
) -> None:
    """`item_reference` reads an item from the log: Bob naming one of Alice's items, in a
    create's input or in a conversation's items, gets the answer for an id that never
    existed, and nothing is written."""
    suffix = alice["done"].removeprefix("resp_")
    own_items = [f"msg_{suffix}_in0", f"msg_{suffix}_1"]
    with http(keyed, alice["key"]) as own:
        for item in own_items:  # they exist: Alice can reference them
            body = {"model": "scripted", "input": [{"type": "item_reference", "id": item}]}
            assert own.post("/v1/responses", json=body).status_code == 200
    with http(keyed, key_of("bob")) as bob:
        for item in [*own_items, "msg_" + "0" * 32 + "_1"]:
            before = log_state(keyed, running=alice["running"])
            body = {"model": "scripted", "input": [{"type": "item_reference", "id": item}]}
            answer = bob.post("/v1/responses", json=body)
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["message"].startswith(f"Item with id '{item}' not found")
            assert log_state(keyed, running=alice["running"]) == before
        # Nor can he add one to a conversation of his own by reference.
        conv = bob.post("/v1/conversations", json={}).json()["id"]
        for item in own_items:
            ref = {"items": [{"type": "item_reference", "id": item}]}
            answer = bob.post(f"/v1/conversations/{conv}/items", json=ref)
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["message"].startswith(f"Item with id '{item}' not found")
            assert bob.post("/v1/conversations", json=ref).status_code == 404
        assert bob.get(f"/v1/conversations/{conv}/items").json()["data"] == []


def test_another_owners_conversation_is_404_everywhere_and_writes_nothing(
    keyed: Server, key_of: Callable[[str], str], alice: dict[str, str]
) -> None:
    with http(keyed, alice["key"]) as own:
        conv = own.post(
            "/v1/conversations", json={"items": [{"role": "user", "content": "secret"}]}
        ).json()
        cid = conv["id"]
        item = own.get(f"/v1/conversations/{cid}/items").json()["data"][0]["id"]
    asks: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"/v1/conversations/{cid}", {}),
        ("POST", f"/v1/conversations/{cid}", {"json": {"metadata": {"a": "b"}}}),
        ("DELETE", f"/v1/conversations/{cid}", {}),
        ("GET", f"/v1/conversations/{cid}/items", {}),
        (
            "POST",
            f"/v1/conversations/{cid}/items",
            {"json": {"items": [{"role": "user", "content": "x"}]}},
        ),
        ("GET", f"/v1/conversations/{cid}/items/{item}", {}),
        ("DELETE", f"/v1/conversations/{cid}/items/{item}", {}),
        (
            "POST",
            "/v1/responses",
            {"json": {"model": "scripted", "input": "x", "conversation": cid}},
        ),
        # Her item named by reference, in a create's input and in a conversation's items.
        (
            "POST",
            "/v1/responses",
            {"json": {"model": "scripted", "input": [{"type": "item_reference", "id": item}]}},
        ),
        ("POST", "/v1/conversations", {"json": {"items": [{"id": item}]}}),
    ]
    with http(keyed, key_of("bob")) as bob:
        for method, path, kw in asks:
            before = log_state(keyed, running=alice["running"])
            answer = bob.request(method, path, **kw)
            assert answer.status_code == 404, (method, path, answer.text)
            assert "secret" not in answer.text
            assert log_state(keyed, running=alice["running"]) == before, (method, path)
    with http(keyed, alice["key"]) as own:
        assert own.get(f"/v1/conversations/{cid}/items").json()["data"][0]["id"] == item
