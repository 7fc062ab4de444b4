"""How a middleware sees a response without wrapping `send`: it `watch`es the request, and
the edge (adapters/http/edge.py), which holds the one wrapper of `send`, shows it the
response's messages; and the status the observers (request log, metrics, traces) record
for a request whose client had gone before it was answered (`unanswered`, `answered`). No
litestar here: the metrics module is also a worker's, which serves no API."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Protocol

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]

WATCHERS = "resplog.watchers"  # the scope's key of a request's watchers (the edge sets it)

# The scope's list of callbacks to run when the connection is lost before the response is
# complete (filled by a response, run by the server's protocol: adapters/cli/protocol.py);
# None once it was lost, or absent under another server: then `receive` says it.
ON_GONE = "resplog.on_gone"

# What the observers record for a request whose client closed its connection before any
# response began (nginx's "client closed request"; no response was sent).
CLIENT_CLOSED = 499


class Watcher(Protocol):
    def sent(self, message: Message) -> bool:
        """Seen `message` (`http.response.start`, then each `http.response.body`); whether
        to be shown the next one."""
        ...


def watch(scope: Scope, watcher: Watcher) -> None:
    """Show `watcher` this HTTP request's response, from inside the edge."""
    watchers: list[Watcher] | None = scope.get(WATCHERS)
    if watchers is None:
        raise RuntimeError("the app must run inside adapters.http.edge")
    watchers.append(watcher)


def unanswered(scope: Scope) -> int:
    """The status to record for a request that ended with no response begun: 499
    (`CLIENT_CLOSED`) when the client had gone first, else 500, what uvicorn answers for an
    app that ends without answering. A client that leaves mid-body or while its create
    commits is not a server error, and an operator who alerts on 5xx must not be woken by
    it."""
    return CLIENT_CLOSED if _gone(scope) else 500


def answered(scope: Scope, status: int) -> int:
    """The status to record for a response begun with `status`: 499 (`CLIENT_CLOSED`) when
    its client had gone before it began, so that nobody got it (a plain create whose client
    gave up while it generated); else `status`. A stream its client leaves midway keeps the
    status its head carried."""
    return CLIENT_CLOSED if _gone(scope) else status


def _gone(scope: Scope) -> bool:
    """Whether the connection was lost before the response was complete (the protocol
    leaves None in `ON_GONE`; a server without it never says)."""
    return ON_GONE in scope and scope[ON_GONE] is None
