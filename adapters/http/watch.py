"""How a middleware sees a response without wrapping `send`: it `watch`es the request, and
the edge (adapters/http/edge.py), which holds the one wrapper of `send`, shows it the
response's messages. No litestar here: the metrics module is also a worker's, which serves
no API."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Protocol

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]

WATCHERS = "resplog.watchers"  # the scope's key of a request's watchers (the edge sets it)


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
