"""Images and files as input, end to end with the official SDK on both stores: accepted,
kept in the log as sent, given to the engine (the scripted one names what it received),
listed back by `input_items`; what this server cannot take is an OpenAI-shaped 400 that
writes nothing."""

from __future__ import annotations

import base64
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Server

PNG = (
    "data:image/png;base64,"
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
NOTES = "data:text/plain;base64," + base64.b64encode(b"remember the milk").decode()


def test_an_image_and_a_file_reach_the_engine_and_come_back_as_sent(
    client: openai.OpenAI,
) -> None:
    content: Any = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": PNG, "detail": "low"},
        {"type": "input_file", "file_data": NOTES, "filename": "notes.txt"},
    ]
    r = client.responses.create(model="scripted", input=[{"role": "user", "content": content}])
    assert r.output_text == (
        "You said: What is this? [received: image (image/png, 70 bytes), "
        "file notes.txt (text/plain, 17 bytes)]"
    )
    items = client.responses.input_items.list(r.id).data
    parts = items[0].content  # type: ignore[union-attr]
    assert [p.type for p in parts] == ["input_text", "input_image", "input_file"]
    assert parts[1].image_url == PNG and parts[1].detail == "low"  # type: ignore[union-attr]
    assert parts[2].file_data == NOTES and parts[2].filename == "notes.txt"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("part", "param", "code"),
    [
        (
            {"type": "input_image", "file_id": "file_1", "detail": "auto"},
            "file_id",
            "unsupported_parameter",
        ),
        (
            {"type": "input_image", "image_url": "ftp://x/y.png", "detail": "auto"},
            "image_url",
            "invalid_value",
        ),
        (
            {"type": "input_file", "file_url": "https://example.com/a.pdf"},
            "file_url",
            "unsupported_parameter",
        ),
        ({"type": "input_file", "file_data": "not a data url"}, "file_data", "invalid_value"),
    ],
)
def test_media_this_server_cannot_take_is_a_400_that_writes_nothing(
    client: openai.OpenAI, server: Server, part: dict[str, Any], param: str, code: str
) -> None:
    before = server.count_rows("responses")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model="scripted",
            input=[{"role": "user", "content": [part]}],  # type: ignore[list-item]
        )
    body: Any = caught.value.body
    assert body["param"] == f"input[0].content[0].{param}" and body["code"] == code
    assert server.count_rows("responses") == before
