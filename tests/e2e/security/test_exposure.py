"""What `serve` shows beside the API: under `--auth keys` the audit view needs its own key
(and is off without one), `/metrics` and `/audit` answer only to the server's own host
names (a DNS-rebinding page or a proxy's outside name is refused), and the audit page
cannot be framed (adapters/http/hosts.py, adapters/cli/access_flags.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Server, stop_server
from tests.e2e.security.conftest import KEYED, http, launch, make_key, sdk

AUDIT_KEY = "audit-secret-for-the-test"
REBIND = {"Host": "rebind.attacker.example"}


@pytest.fixture(scope="module")
def audited(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """`--auth keys` on the loopback with an audit key and a public host name, every other
    access flag left at its default (`auto`)."""
    srv = launch(
        request,
        tmp_path_factory,
        "sqlite",
        *KEYED,
        "--public-host",
        "audit.example.com",
        env={"RESPLOG_AUDIT_KEY": AUDIT_KEY},
    )
    yield srv
    stop_server(srv)


def test_under_keys_the_audit_view_is_off_without_an_audit_key(keyed: Server) -> None:
    key = make_key(keyed, "alice")
    made = sdk(keyed, key).responses.create(model="scripted", input="alice's secret plan")
    with http(keyed, None) as anyone:
        for path in ("/audit", "/audit/api/responses", f"/audit/api/responses/{made.id}"):
            shown = anyone.get(path)
            assert shown.status_code == 404, path
            assert "secret plan" not in shown.text and made.id not in shown.text


def test_under_keys_the_audit_view_wants_its_key(audited: Server) -> None:
    key = make_key(audited, "bob")
    made = sdk(audited, key).responses.create(model="scripted", input="bob's secret plan")
    one = f"/audit/api/responses/{made.id}"
    with http(audited, None) as anyone:
        refused = anyone.get(one)
        assert refused.status_code == 401 and "secret plan" not in refused.text
    with http(audited, key) as owner:  # an API key is not the audit key
        assert owner.get(one).status_code == 401
    with http(audited, AUDIT_KEY) as auditor:
        assert "bob's secret plan" in auditor.get(one).text


@pytest.mark.parametrize("path", ["/metrics", "/audit", "/audit/api/responses"])
def test_a_foreign_host_is_refused_the_pages(audited: Server, path: str) -> None:
    with http(audited, AUDIT_KEY) as auditor:
        for host in ("rebind.attacker.example", "rebind.attacker.example:80", "127.0.0.1.nip.io"):
            refused = auditor.get(path, headers={"Host": host})
            assert refused.status_code == 421, host
            assert refused.json()["error"]["code"] == "host_not_allowed"
            assert "secret" not in refused.text and "resplog_" not in refused.text
        port = audited.base_url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "[::1]", "audit.example.com"):
            assert auditor.get(path, headers={"Host": host}).status_code == 200, host


def test_the_api_is_not_held_to_the_host_check(audited: Server) -> None:
    with http(audited, make_key(audited, "carol")) as client:
        assert client.get("/v1/models", headers=REBIND).status_code == 200


def test_the_audit_page_cannot_be_framed(audited: Server) -> None:
    with http(audited, None) as anyone:
        for path in ("/audit", "/audit/api/responses"):
            page = anyone.get(path)
            assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
            assert page.headers["x-frame-options"] == "DENY"
