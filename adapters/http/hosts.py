"""Which `Host` the operator's pages answer to: `/metrics` and the audit view at `/audit`
serve only a request whose `Host` is a loopback name, an address, the bind address or a
name given with `--public-host`; any other is answered 421 and reaches neither.

Why: a page open on a loopback bind is open to every process of the machine, a browser's
included. A web page can point a name of its own at 127.0.0.1 (DNS rebinding), and the
browser then lets that page read what the port answers, as its own origin; every such
request carries the page's name in `Host`. A proxy on the machine that forwards the
outside world to the loopback passes the outside name on in the same header. An address
in `Host` (`10.0.0.5:8000`) is never a rebinding (the page's origin is then that address
itself, which it could have read directly), so a scraper or an auditor that names the
server by its address is served. The API is not checked here: under `--auth keys` a
browser holds no key for a rebinding page to use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from typing import Any

import msgspec


class HostCheck:
    """The names a guarded page answers to, besides the loopback's and addresses."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n.strip().lower().rstrip(".") for n in names if n.strip())

    def allows(self, host: str) -> bool:
        """Whether a `Host` header's value (its port is ignored) is one of this server's."""
        name = _without_port(host.strip().lower()).rstrip(".")
        if not name:
            return False
        if name == "localhost" or name.endswith(".localhost") or name in self.names:
            return True
        try:
            ipaddress.ip_address(name.strip("[]"))
        except ValueError:
            return False
        return True

    def asgi(self, app: Any) -> Any:
        """`app`, with `/metrics` and `/audit…` answered only to a host this check allows."""

        async def middleware(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and _guarded(scope["path"]):
                host = dict(scope.get("headers") or []).get(b"host", b"")
                if not self.allows(host.decode("latin-1")):
                    await _refuse(send)
                    return
            await app(scope, receive, send)

        return middleware


def _guarded(path: str) -> bool:
    return path == "/metrics" or path == "/audit" or path.startswith("/audit/")


def _without_port(host: str) -> str:
    if host.startswith("["):  # `[::1]:8000`
        return host.partition("]")[0] + "]"
    name, _, _ = host.partition(":") if host.count(":") == 1 else (host, "", "")
    return name


_REFUSAL = msgspec.json.encode(
    {
        "error": {
            "message": "This page answers only to its server's own host names "
            "(the loopback's, its addresses, and --public-host).",
            "type": "invalid_request_error",
            "param": None,
            "code": "host_not_allowed",
        }
    }
)


async def _refuse(send: Any) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(_REFUSAL)),
        (b"cache-control", b"no-store"),
    ]
    await send({"type": "http.response.start", "status": 421, "headers": headers})
    await send({"type": "http.response.body", "body": _REFUSAL})
