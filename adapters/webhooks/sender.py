"""`Sender` over httpx: one POST of a webhook to where the operator lets the server reach.

- Where: the rule of MCP servers (adapters/tools/hosts.py), with its own setting
  (`--webhook-hosts`, default public addresses only): the host is resolved once, every
  address must be allowed, and the connection goes to the address checked.
- No redirect is followed: a 3xx is a failed attempt, like any other non-2xx (a receiver
  that moved is fixed by its operator; following it would let a receiver send the signed
  event, and the server's connection, anywhere).
- The answer is read up to `MAX_ANSWER_BYTES`, and the whole attempt (connect, send, answer)
  is bounded by the timeout, so a receiver that drips its answer holds nothing longer.
- Each endpoint's URL has a connection pool of its own, so one slow receiver's open
  connections never make another's attempts wait for a connection.

Errors are words about the attempt (status, timeout, refused host), never the secrets or
the signature.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

import httpcore2
import httpx2

from adapters.tools.hosts import GuardedBackend, HostPolicy
from service.webhooks.model import Sent

MAX_ANSWER_BYTES = 64 * 1024
_SHOWN = 200  # characters of a failed answer's body kept in the attempt's error
_POOLS = 1024  # endpoint pools kept; the least recently used is closed beyond


def _reason(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class HttpSender:
    """Sends webhooks; `policy` None: anywhere (`--webhook-hosts any`)."""

    def __init__(self, policy: HostPolicy | None, *, connections: int = 16) -> None:
        self._policy = None if policy is None or policy.anything else policy
        self._connections = connections
        self._clients: OrderedDict[str, httpx2.AsyncClient] = OrderedDict()
        self._closing: set[asyncio.Future[None]] = set()

    def _client(self, url: str) -> httpx2.AsyncClient:
        client = self._clients.get(url)
        if client is not None:
            self._clients.move_to_end(url)
            return client
        transport = httpx2.AsyncHTTPTransport()
        backend = (
            httpcore2.AnyIOBackend()
            if self._policy is None
            else GuardedBackend(
                self._policy, what="the webhook endpoint", setting="--webhook-hosts"
            )
        )
        transport._pool = httpcore2.AsyncConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=self._connections,
            max_keepalive_connections=self._connections,
            keepalive_expiry=5.0,
            network_backend=backend,
        )
        client = httpx2.AsyncClient(transport=transport, follow_redirects=False, timeout=None)
        self._clients[url] = client
        while len(self._clients) > _POOLS:
            _, old = self._clients.popitem(last=False)
            closing = asyncio.ensure_future(old.aclose())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        return client

    async def post(self, url: str, headers: dict[str, str], body: bytes, timeout_s: float) -> Sent:
        status: int | None = None
        try:
            async with asyncio.timeout(timeout_s):
                client = self._client(url)
                async with client.stream("POST", url, headers=headers, content=body) as answer:
                    status = answer.status_code
                    kept = bytearray()
                    async for chunk in answer.aiter_raw():
                        kept += chunk[: MAX_ANSWER_BYTES - len(kept)]
                        if len(kept) >= MAX_ANSWER_BYTES:
                            break  # the rest is not read: the connection is closed
        except TimeoutError:
            return Sent(status, f"no answer within {timeout_s:g}s")
        except (httpx2.HTTPError, httpcore2.NetworkError, OSError) as exc:
            return Sent(status, _reason(exc))
        if 200 <= status < 300:
            return Sent(status, None)
        shown = bytes(kept[:_SHOWN]).decode("utf-8", "replace").strip()
        where = ""
        if 300 <= status < 400:
            where = " (a redirect: not followed)"
        return Sent(status, f"HTTP {status}{where}" + (f": {shown}" if shown else ""))

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for client in clients:
            await client.aclose()
