"""The Conversations API end to end with the official SDK, on both stores: a conversation is a
stream of the log; responses that name it see its items and add theirs when they end."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from typing import Any

import asyncpg
import httpx
import openai
import pytest

from tests.e2e.conftest import RESPLOG, Server

TRANSCRIPT = {"scripted_mode": "transcript"}


def verify_all(server: Server) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RESPLOG, "verify", "--all", "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_three_turns_through_a_conversation_and_its_items(client: openai.OpenAI) -> None:
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ada."}],
        metadata={"topic": "intro"},
    )
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "intro"}
    one = client.responses.create(model="scripted", conversation=conv.id, input="I like tea.")
    assert one.conversation is not None and one.conversation.id == conv.id
    two = client.responses.create(
        model="scripted", conversation={"id": conv.id}, input="And?", metadata=TRANSCRIPT
    )
    # The engine saw the conversation's items, then the new input.
    assert "user: My name is Ada." in two.output_text
    assert "user: I like tea." in two.output_text
    assert "assistant: You said: I like tea." in two.output_text
    items = client.conversations.items.list(conv.id, order="asc").data
    kinds = [(i.type, getattr(i, "role", None)) for i in items]
    assert kinds[0] == ("message", "user")
    assert len(items) == 1 + 3 + 3  # the first item; each turn: input, reasoning, message
    # Cursor paging, both orders.
    first = client.conversations.items.list(conv.id, order="asc", limit=2)
    assert first.has_more and len(first.data) == 2
    rest = client.conversations.items.list(conv.id, order="asc", limit=100, after=first.data[-1].id)
    assert [i.id for i in [*first.data, *rest.data]] == [i.id for i in items]
    newest = client.conversations.items.list(conv.id, order="desc", limit=3).data
    assert [i.id for i in newest] == [i.id for i in reversed(items)][:3]
    assert (
        client.conversations.items.retrieve(items[0].id, conversation_id=conv.id).id == items[0].id
    )
    # Deleting an item hides it from the list and from the next prompt.
    client.conversations.items.delete(items[0].id, conversation_id=conv.id)
    assert items[0].id not in [i.id for i in client.conversations.items.list(conv.id).data]
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(items[0].id, conversation_id=conv.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve("msg_nope", conversation_id=conv.id)
    # Its id stays taken: adding an item of that id again is the duplicate 400, not a 200
    # for an item that would never show.
    with pytest.raises(openai.BadRequestError) as again:
        client.conversations.items.create(
            conv.id, items=[{"id": items[0].id, "role": "user", "content": "back?"}]
        )
    assert again.value.body["param"] == "items[0].id"  # type: ignore[index]
    three = client.responses.create(
        model="scripted", conversation=conv.id, input="Who am I?", metadata=TRANSCRIPT
    )
    # (Its text still shows inside turn two's answer, which quoted its prompt.)
    assert three.output_text.startswith("user: I like tea. | ")
    updated = client.conversations.update(conv.id, metadata={"topic": "tea"})
    assert client.conversations.retrieve(conv.id).metadata == {"topic": "tea"} == updated.metadata
    gone = client.conversations.delete(conv.id)
    assert gone.deleted and gone.id == conv.id
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="scripted", conversation=conv.id, input="x")


def test_bad_conversation_requests_are_openai_errors_and_write_nothing(
    client: openai.OpenAI, server: Server, http: httpx.Client
) -> None:
    conv = client.conversations.create()
    prev = client.responses.create(model="scripted", input="x")
    before = server.count_rows("responses"), server.count_rows("events")
    with pytest.raises(openai.BadRequestError) as both:
        client.responses.create(
            model="scripted", input="x", conversation=conv.id, previous_response_id=prev.id
        )
    assert both.value.code == "mutually_exclusive_parameters"
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="scripted", input="x", conversation="nope")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="scripted", input="x", conversation="conv_" + "0" * 32)
    too_many: Any = [{"role": "user", "content": str(i)} for i in range(21)]
    with pytest.raises(openai.BadRequestError):
        client.conversations.items.create(conv.id, items=too_many)
    with pytest.raises(openai.BadRequestError):
        client.conversations.create(items=[{"type": "message", "role": "wizard", "content": "x"}])
    assert (server.count_rows("responses"), server.count_rows("events")) == before
    assert http.get("/v1/conversations/resp_abc").status_code == 400


def test_verify_passes_on_a_log_with_conversations(client: openai.OpenAI, server: Server) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    client.responses.create(model="scripted", conversation=conv.id, input="again")
    got = verify_all(server)
    assert got.returncode == 0, got.stdout + got.stderr


def test_the_conversations_own_log_replays_and_tails(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "hi"}])
    r = client.responses.create(model="scripted", conversation=conv.id, input="again")
    lines = http.get(
        f"/v1/conversations/{conv.id}/events", params={"format": "jsonl", "follow": "false"}
    ).text.splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["type"] for e in events] == [
        "conversation.created",
        "conversation.items.added",
        "conversation.items.added",
    ]
    assert [e["sequence_number"] for e in events] == [0, 1, 2]
    assert events[2]["response_id"] == r.id
    # A live tail sees the next change, and can start after a position.
    with http.stream(
        "GET", f"/v1/conversations/{conv.id}/events", params={"starting_after": 2}
    ) as tail:
        client.conversations.update(conv.id, metadata={"k": "v"})
        for line in tail.iter_lines():
            if line.startswith("data: "):
                assert json.loads(line[6:])["type"] == "conversation.updated"
                break


def test_the_admin_cli_lists_and_shows_conversations(client: openai.OpenAI, server: Server) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "first words"}])
    r = client.responses.create(model="scripted", conversation=conv.id, input="second")
    first = client.conversations.items.list(conv.id, order="asc").data[0]
    client.conversations.items.delete(first.id, conversation_id=conv.id)

    def cli(*args: str) -> str:
        got = subprocess.run(
            [RESPLOG, "conversations", *args, "--database-url", server.database_url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert got.returncode == 0, got.stderr
        return got.stdout

    listed = {c["id"]: c for c in json.loads(cli("list", "--json", "--limit", "1000"))}
    assert listed[conv.id]["items"] == 3 and listed[conv.id]["owner"] == "anonymous"
    shown = cli("show", conv.id)
    assert f"{first.id} user: first words  [deleted]" in shown
    assert f"(from {r.id})" in shown
    view = json.loads(cli("show", conv.id, "--json"))
    assert [e["deleted"] for e in view["items"]] == [True, False, False, False]
    # `resplog conversation conv_…`: the turns of the conversation, as for a chain.
    told = subprocess.run(
        [RESPLOG, "conversation", conv.id, "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert told.returncode == 0, told.stderr
    assert "user: [deleted] first words" in told.stdout
    assert r.id in told.stdout and "assistant: You said: second" in told.stdout


def _execute(server: Server, sql: str) -> None:
    if server.kind == "sqlite":
        with sqlite3.connect(server.database_url.split("///", 1)[1]) as db:
            db.execute(sql)
        return

    async def pg() -> None:
        conn = await asyncpg.connect(server.database_url.replace("+asyncpg", ""))
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(pg())


def test_verify_finds_a_read_model_that_left_its_log(client: openai.OpenAI, server: Server) -> None:
    """An item hidden behind the log's back (no `conversation.item.deleted` event) is a
    violation that names the conversation; `verify --all` exits 1."""
    conv = client.conversations.create(items=[{"role": "user", "content": "keep me"}])
    _execute(
        server,
        f"UPDATE conversation_items SET deleted_at = 1 WHERE conversation_id = '{conv.id}'",
    )
    try:
        got = verify_all(server)
        assert got.returncode == 1
        assert f"violation: {conv.id} @-: read_model:" in got.stdout
    finally:
        client.conversations.delete(conv.id)
        _execute(server, f"DELETE FROM conversation_items WHERE conversation_id = '{conv.id}'")
        _execute(server, f"DELETE FROM events WHERE stream_id = '{conv.id}'")
        _execute(server, f"DELETE FROM conversations WHERE id = '{conv.id}'")


# Items a client passes back from an OpenAI answer, of kinds no engine here is given, as
# openai-python types them (`ConversationItem`); the Agents SDK's `OpenAIConversationsSession`
# adds every item of a run, these included.
PASSED_BACK: list[dict[str, Any]] = [
    {
        "type": "web_search_call",
        "id": "ws_tea",
        "status": "completed",
        "action": {"type": "search", "query": "oolong brewing temperature"},
    },
    {"type": "mcp_list_tools", "id": "mcpl_tea", "server_label": "docs", "tools": []},
    {"type": "local_shell_call_output", "output": "steeped"},
]


def test_items_of_kinds_no_engine_takes_join_a_conversation_as_sent(
    client: openai.OpenAI, server: Server
) -> None:
    """Never a 400 for an item OpenAI takes: each is kept as sent (an id is given to one
    that came without), listed and retrieved as sent, and shown to no engine."""
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "Tea?"}, PASSED_BACK[0]]
    )
    added = client.conversations.items.create(conv.id, items=PASSED_BACK[1:])  # type: ignore[arg-type]
    assert [i.type for i in added.data] == ["mcp_list_tools", "local_shell_call_output"]
    made = added.data[1].id
    assert made.startswith("item_")
    listed = [
        i.model_dump(exclude_none=True)
        for i in client.conversations.items.list(conv.id, order="asc").data
    ]
    assert listed[1:] == [PASSED_BACK[0], PASSED_BACK[1], {"id": made, **PASSED_BACK[2]}]
    got = client.conversations.items.retrieve("ws_tea", conversation_id=conv.id)
    assert got.model_dump(exclude_none=True) == PASSED_BACK[0]
    seen = client.responses.create(
        model="scripted", conversation=conv.id, input="And now?", metadata=TRANSCRIPT
    )
    assert seen.output_text.startswith("user: Tea? | user: And now?"), seen.output_text
    assert "oolong" not in seen.output_text and "steeped" not in seen.output_text
    shown = subprocess.run(
        [RESPLOG, "conversations", "show", conv.id, "--database-url", server.database_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "ws_tea web_search_call" in shown.stdout and f"{made} local_shell_call_output" in (
        shown.stdout
    )
    checked = verify_all(server)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_a_response_leaves_the_items_it_set_aside_in_its_conversation_in_place(
    client: openai.OpenAI,
) -> None:
    """A create on a conversation that passes back items no engine takes: the conversation
    gets its input as sent, those items in their place, and then its output."""
    conv = client.conversations.create()
    r = client.responses.create(
        model="scripted",
        conversation=conv.id,
        input=[{"role": "user", "content": "Tea?"}, PASSED_BACK[0], PASSED_BACK[2]],
        metadata=TRANSCRIPT,
    )
    assert r.output_text.startswith("user: Tea?"), r.output_text
    listed = client.conversations.items.list(conv.id, order="asc").data
    kinds = [i.type for i in listed]
    assert kinds[:3] == ["message", "web_search_call", "local_shell_call_output"]
    assert listed[1].model_dump(exclude_none=True) == PASSED_BACK[0]
    assert listed[2].id == f"item_{r.id.removeprefix('resp_')}_in2"
    assert kinds[-1] == "message"


@pytest.mark.parametrize(
    ("item", "param"),
    [
        ({**PASSED_BACK[0], "id": 7}, "items[0].id"),
        ({**PASSED_BACK[0], "id": "w" * 129}, "items[0].id"),
        ({"type": "set_aside", "item": PASSED_BACK[0]}, "items[0].type"),
    ],
)
def test_a_bad_set_aside_item_is_a_400_and_adds_nothing(
    client: openai.OpenAI, item: dict[str, Any], param: str
) -> None:
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as caught:
        client.conversations.items.create(conv.id, items=[item])  # type: ignore[list-item]
    assert caught.value.body["param"] == param  # type: ignore[index]
    assert client.conversations.items.list(conv.id).data == []


def test_an_approval_answer_without_an_id_gets_one(client: openai.OpenAI) -> None:
    """Every item kind a conversation takes is given an id of the server's when it has
    none (an `mcp_approval_response` once had no prefix, and failed)."""
    conv = client.conversations.create()
    answer = {"type": "mcp_approval_response", "approval_request_id": "mcpr_x", "approve": True}
    added = client.conversations.items.create(conv.id, items=[answer])  # type: ignore[list-item]
    assert added.data[0].id.startswith("mcpa_")


def test_items_of_earlier_responses_are_added_by_reference(
    client: openai.OpenAI, server: Server
) -> None:
    """`item_reference` in a conversation's items (openai-python `ItemCreateParams`: any
    input item): the item it names joins the conversation under its own id, as a
    reference in a create's input is replaced by its item; the next turn's model sees it."""
    tools: Any = [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}
    ]
    earlier = client.responses.create(model="scripted", input="Tea?")
    called = client.responses.create(model="scripted", input="go", tools=tools)
    reasoning, message = earlier.output[0], earlier.output[-1]
    asked = f"msg_{earlier.id.removeprefix('resp_')}_in0"
    conv = client.conversations.create(items=[{"type": "item_reference", "id": asked}])
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "item_reference", "id": reasoning.id},
            {"id": message.id},  # openai-python `ItemReference`: the type may be left out
            {"type": "item_reference", "id": called.output[-1].id},
        ],
    )
    assert [(i.id, i.type) for i in added.data] == [
        (reasoning.id, "reasoning"),
        (message.id, "message"),
        (called.output[-1].id, "function_call"),
    ]
    listed = client.conversations.items.list(conv.id, order="asc").data
    assert [i.id for i in listed] == [asked, reasoning.id, message.id, called.output[-1].id]
    first = listed[0].model_dump(exclude_none=True)
    assert (first["role"], first["content"][0]["text"]) == ("user", "Tea?")
    said = listed[2].model_dump(exclude_none=True)
    assert said["role"] == "assistant"
    assert said["content"] == message.model_dump(exclude_none=True)["content"]
    seen = client.responses.create(
        model="scripted", conversation=conv.id, input="More?", metadata=TRANSCRIPT
    )
    shown = seen.output_text.split(" | ")
    assert shown[0] == "user: Tea?" and shown[1].startswith("reasoning: "), shown
    assert shown[2:] == ["assistant: You said: Tea?", "function_call: ", "user: More?"], shown
    # Named again, an item is a duplicate; an unknown id is OpenAI's 404; neither adds.
    count = len(client.conversations.items.list(conv.id, limit=100).data)
    with pytest.raises(openai.BadRequestError) as again:
        client.conversations.items.create(conv.id, items=[{"type": "item_reference", "id": asked}])
    assert again.value.code == "invalid_value"
    assert again.value.body["param"] == "items[0].id"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as twice:
        client.conversations.create(items=[{"type": "item_reference", "id": asked}, {"id": asked}])
    assert twice.value.body["param"] == "items[1].id"  # type: ignore[index]
    unknown = "msg_00000000000000000000000000000000_0"
    with pytest.raises(openai.NotFoundError) as caught:
        client.conversations.items.create(
            conv.id,
            items=[
                {"role": "user", "content": "kept out"},
                {"type": "item_reference", "id": unknown},
            ],
        )
    body: Any = caught.value.body
    assert body["param"] == "items[1]"
    assert body["message"].startswith(f"Item with id '{unknown}' not found.")
    with pytest.raises(openai.NotFoundError):
        client.conversations.create(items=[{"type": "item_reference", "id": unknown}])
    unstored = client.responses.create(model="scripted", input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.create(
            conv.id, items=[{"type": "item_reference", "id": unstored.output[-1].id}]
        )
    assert len(client.conversations.items.list(conv.id, limit=100).data) == count
    checked = verify_all(server)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_items_added_to_a_conversation_are_found_by_reference(
    client: openai.OpenAI, server: Server
) -> None:
    """An item added through the API has an id of the server's that names its conversation,
    so a reference finds it, in a create's input and in another conversation's items, until
    it or its conversation is deleted."""
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ada."}, PASSED_BACK[2]]
    )
    said, shell = client.conversations.items.list(conv.id, order="asc").data
    assert said.id.startswith(f"msg_{conv.id.removeprefix('conv_')}_")
    assert shell.id.startswith(f"item_{conv.id.removeprefix('conv_')}_")
    r = client.responses.create(
        model="scripted",
        input=[
            {"type": "item_reference", "id": said.id},
            {"type": "item_reference", "id": shell.id},
            {"role": "user", "content": "Who am I?"},
        ],
        metadata=TRANSCRIPT,
    )
    assert r.output_text.startswith("user: My name is Ada. | user: Who am I?"), r.output_text
    assert "steeped" not in r.output_text  # set aside, in the reference's place
    asked = client.responses.input_items.list(r.id, order="asc").data
    assert [(i.id, i.type) for i in asked[:2]] == [
        (said.id, "message"),
        (shell.id, "local_shell_call_output"),
    ]
    other = client.conversations.create(items=[{"id": said.id}])
    client.conversations.items.create(other.id, items=[{"type": "item_reference", "id": shell.id}])
    copied = client.conversations.items.list(other.id, order="asc").data
    assert [i.model_dump(exclude_none=True) for i in copied] == [
        said.model_dump(exclude_none=True),
        shell.model_dump(exclude_none=True),
    ]
    # Deleted, the item is gone for references too; so is every item of a deleted
    # conversation.
    client.conversations.items.delete(said.id, conversation_id=conv.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="scripted", input=[{"type": "item_reference", "id": said.id}])
    client.conversations.delete(conv.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.conversations.items.create(
            other.id, items=[{"type": "item_reference", "id": shell.id}]
        )
    assert caught.value.body["param"] == "items[0]"  # type: ignore[index]
    checked = verify_all(server)
    assert checked.returncode == 0, checked.stdout + checked.stderr
