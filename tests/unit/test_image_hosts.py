"""The host rule on the images a prompt names by URL (adapters/tools/images.py): an
engine's upstream fetches them, so a host the rule refuses is never handed on."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.tools.hosts import HostPolicy
from adapters.tools.images import ImageHosts, image_urls
from domain.errors import EngineError
from domain.objects import InputImage, InputMessage, InputText
from tests.fakes.prompts import answer, make_prompt, turn, user

# What the test's names resolve to (this box's DNS is not the test's to set).
NAMES = {"cdn.example": "93.184.215.14", "inside.example": "10.1.2.3"}


async def resolve(host: str, port: int, **_: object) -> list[tuple[Any, ...]]:
    address = NAMES.get(host, host)
    if address[0].isalpha():
        raise OSError("no such name")
    return [(0, 0, 0, "", (address, port))]


def image(url: str) -> InputMessage:
    return InputMessage(
        id="msg_i", role="user", content=[InputText(text="look"), InputImage(image_url=url)]
    )


async def check(url: str, policy: str = "public") -> None:
    hosts = ImageHosts(HostPolicy.parse(policy), resolve=resolve)
    await hosts.check(make_prompt([image(url)]))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/x.png",
        "http://[::1]/x.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://[64:ff9b::a9fe:a9fe]/x.png",
        "https://inside.example/x.png",  # a name resolving to a private address
        "https://unknown.example/x.png",  # a name this server cannot resolve
        "http:///x.png",  # no host
    ],
)
async def test_an_image_url_the_rule_refuses_is_an_invalid_prompt(url: str) -> None:
    with pytest.raises(EngineError) as refused:
        await check(url)
    assert refused.value.code == "invalid_prompt"
    assert "10.1.2.3" not in str(refused.value)  # what a name resolved to is not told


@pytest.mark.parametrize(
    ("url", "policy"),
    [
        ("https://cdn.example/cat.png", "public"),
        ("https://93.184.215.14/cat.png", "public"),
        ("https://inside.example/x.png", "public,10.0.0.0/8"),
        ("https://unknown.example/x.png", "unknown.example"),  # named: not resolved
        ("http://127.0.0.1:8000/x.png", "any"),
        ("data:image/png;base64,iVBORw0KGgo=", "public"),  # bytes, fetched by nobody
    ],
)
async def test_an_image_url_the_rule_allows_passes(url: str, policy: str) -> None:
    await check(url, policy)


async def test_the_history_images_are_checked_too() -> None:
    earlier = turn([image("http://10.0.0.1/x.png")], [answer("A cat.")])
    prompt = make_prompt([user("And now?")], history=[earlier])
    assert list(image_urls(prompt)) == ["http://10.0.0.1/x.png"]
    with pytest.raises(EngineError):
        await ImageHosts(resolve=resolve).check(prompt)
