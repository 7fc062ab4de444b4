"""The host rule (`--mcp-hosts`, adapters/tools/hosts.py) on the images a prompt names by
URL, before an engine hands them to an upstream that fetches them itself (the chat engine,
adapters/engines/openai_chat.py: vLLM fetches an `image_url` from its own network).

Why check and pass the URL on, rather than fetch the image here and send its bytes: the
upstream then stays the one that fetches, as OpenAI's own API does and as the operator set
it up (its network, its limits, its cache, a request the size the client made it), and
this server opens no new way out of the operator's network. What the rule adds is that
no client can have the upstream reach an address the operator's rule refuses: a private
or loopback address, a cloud's metadata address, a name resolving to one of them, or a
name this server cannot resolve (the upstream's resolver may know it as an inside host).
What it cannot see is what the upstream does next: a redirect it follows, or a name that
resolves elsewhere by the time it fetches; docs/security.md says how to close those on the
upstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

import anyio
import httpcore2

from adapters.tools.hosts import HostPolicy, Resolve, resolved
from domain.errors import EngineError
from domain.generation import Prompt
from domain.objects import InputImage, InputItem, InputMessage

_PORTS = {"http": 80, "https": 443}


class ImageHosts:
    """Checks a prompt's image URLs against `policy` (`public` unless told otherwise)."""

    def __init__(self, policy: HostPolicy | None = None, resolve: Resolve | None = None):
        self.policy = policy or HostPolicy(public=True)
        self._resolve = resolve or anyio.getaddrinfo

    async def check(self, prompt: Prompt) -> None:
        """An EngineError (`invalid_prompt`) for the first image URL whose host is out of
        reach; each host is resolved once."""
        if self.policy.anything:
            return
        seen: set[tuple[str, int]] = set()
        for url in image_urls(prompt):
            host, port = _target(url)
            if (host, port) in seen:
                continue
            seen.add((host, port))
            if not await self._reachable(host, port):
                raise EngineError(
                    f"the image URL's host {host} is not one this server lets its engine "
                    "reach (its operator's --mcp-hosts)",
                    code="invalid_prompt",
                )

    async def _reachable(self, host: str, port: int) -> bool:
        if self.policy.named(host):
            return True
        try:
            addresses = await resolved(host, port, self._resolve)
        except httpcore2.ConnectError:
            return False  # not checkable here, so not handed on
        return not self.policy.refuses(host, addresses)


def image_urls(prompt: Prompt) -> Iterator[str]:
    """The URLs (not data URLs) of the images the prompt sends: its history's and its own."""
    for turn in prompt.history:
        yield from _urls(turn.input)
    yield from _urls(prompt.input)


def _urls(items: Iterable[InputItem]) -> Iterator[str]:
    for item in items:
        if isinstance(item, InputMessage):
            for part in item.content:
                url = part.image_url if isinstance(part, InputImage) else None
                if url and not url[:5].lower().startswith("data:"):
                    yield url


def _target(url: str) -> tuple[str, int]:
    """The host and port a URL reaches; an unparsable one is an EngineError."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or _PORTS.get(parts.scheme.lower(), 0)
    except ValueError:
        host, port = "", 0
    if not host or not port:
        raise EngineError("an image URL names no host this server can check", code="invalid_prompt")
    return host, port
