"""The `Host` that `/metrics` and `/audit` answer to (adapters/http/hosts.py), and the audit
view's `auto` under `--auth keys` (adapters/cli/access_flags.py)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.cli.access_flags import audit_settings
from adapters.http.hosts import HostCheck


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        ("127.0.0.1:8000", True),
        ("localhost", True),
        ("LOCALHOST:8000", True),
        ("app.localhost", True),  # the loopback's own domain (RFC 6761)
        ("[::1]:8000", True),
        ("10.0.0.5:8000", True),  # an address is never a rebinding
        ("audit.example.com", True),  # --public-host
        ("audit.example.com.:443", True),
        ("rebind.attacker.example", False),
        ("localhost.attacker.example", False),
        ("127.0.0.1.nip.io", False),
        ("example.com", False),
        ("", False),
        (":8000", False),
    ],
)
def test_the_pages_answer_to_the_servers_own_names_only(host: str, allowed: bool) -> None:
    assert HostCheck(["audit.example.com"]).allows(host) is allowed


async def test_a_refused_host_never_reaches_the_page() -> None:
    reached: list[str] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    guarded = HostCheck().asgi(app)
    for path in ("/metrics", "/audit", "/audit/api/responses", "/v1/models", "/auditor"):
        scope = {"type": "http", "path": path, "headers": [(b"host", b"evil.example")]}
        await guarded(scope, None, send)
    assert reached == ["/v1/models", "/auditor"]  # the API and other paths: not checked here
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [421] * 3


@pytest.mark.parametrize(
    ("host", "key", "want"),
    [
        ("127.0.0.1", "k", "key"),
        ("127.0.0.1", None, "off"),  # no key to ask for: nobody sees the log
        ("0.0.0.0", "k", "key"),
        ("0.0.0.0", None, "off"),
    ],
)
def test_under_keys_auto_is_the_audit_key(host: str, key: str | None, want: str) -> None:
    assert audit_settings(host, "auto", key, "keys")["audit_view"] == want
    assert audit_settings(host, "open", key, "keys")["audit_view"] == "open"  # asked for
