"""The web audit view (`/audit`, adapters/auditview) in a real headless browser: Debian's
chromium driven by Playwright's Python package, against a real server with the scripted
engine. The page lists responses, filters them, opens one (its turns and its SVG
timeline), follows a live background response to its end, and shows a prompt's markup as
text; and the access modes hold."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.e2e.conftest import Server, start_server, stop_server

CHROMIUM = os.environ.get("RESPLOG_TEST_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "audit.png"
EVIL = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'

pytestmark = pytest.mark.skipif(
    shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists(),
    reason=f"no chromium at {CHROMIUM} (.ci/run installs Debian's)",
)


@pytest.fixture
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def test_the_page_lists_filters_opens_and_follows(
    server: Server, client: openai.OpenAI, browser: Browser
) -> None:
    evil = client.responses.create(model="scripted", input=EVIL, metadata={"audit": "evil"})
    first = client.responses.create(model="scripted", input="the first turn")
    second = client.responses.create(
        model="scripted", input="the second turn", previous_response_id=first.id
    )
    failed = client.responses.create(
        model="scripted", input="fail please", metadata={"scripted_mode": "fail"}
    )
    assert failed.status == "failed"
    conv = client.conversations.create(items=[{"role": "user", "content": "A conversation."}])
    client.responses.create(model="scripted", conversation=conv.id, input="In it.")

    # The page's Content-Security-Policy would also stop an injected script; bypass it here
    # so that the check below proves what it must: values go in as text, never as markup
    # (and Playwright's own waits evaluate strings, which the policy forbids).
    page = browser.new_page(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.base_url}/audit")
    rows = page.locator("#responses tbody tr")
    for rid in (evil.id, first.id, second.id, failed.id):
        page.wait_for_selector(f'#responses tbody tr[data-id="{rid}"]')
    page.wait_for_selector(f'#conversations tbody tr[data-id="{conv.id}"]')

    # Filter by status: only failed rows remain, and the failed one is among them.
    page.select_option("#f-status", "failed")
    page.click("#f-apply")
    page.wait_for_selector(f'#responses tbody tr[data-id="{first.id}"]', state="detached")
    statuses = rows.evaluate_all("rs => rs.map(r => r.dataset.status)")
    assert statuses and set(statuses) == {"failed"}
    assert page.locator(f'#responses tbody tr[data-id="{failed.id}"]').count() == 1
    page.select_option("#f-status", "")

    # Filter by end reason: the engine's error code that ended the failed one.
    page.fill("#f-reason", "engine_error")
    page.click("#f-apply")
    page.wait_for_selector(f'#responses tbody tr[data-id="{second.id}"]', state="detached")
    assert page.locator(f'#responses tbody tr[data-id="{failed.id}"]').count() == 1
    assert set(rows.evaluate_all("rs => rs.map(r => r.dataset.status)")) == {"failed"}
    page.fill("#f-reason", "")
    page.click("#f-apply")
    page.wait_for_selector(f'#responses tbody tr[data-id="{second.id}"]')

    # Open the second turn: both turns of its conversation, and the timeline.
    page.click(f'#responses tbody tr[data-id="{second.id}"]')
    page.wait_for_selector("#timeline svg")
    assert page.locator("#d-id").text_content() == second.id
    turns = page.locator("#turns .turn")
    assert turns.count() == 2
    assert "the first turn" in (turns.nth(0).text_content() or "")
    assert "the second turn" in (turns.nth(1).text_content() or "")
    assert "You said: the second turn" in (turns.nth(1).text_content() or "")
    assert "usage:" in (turns.nth(1).text_content() or "")
    events = page.evaluate(
        f"fetch('/audit/api/responses/{second.id}').then(r => r.json()).then(v => v.events.length)"
    )
    assert page.locator("#timeline svg rect.mark").count() == events
    assert page.locator("#timeline svg rect.mark-terminal").count() == 1
    assert page.locator("#timeline svg .first-delta").count() == 1
    assert "time to first delta" in (page.locator("#d-durations").text_content() or "")

    # A prompt's markup is shown as text and never runs.
    page.click(f'#responses tbody tr[data-id="{evil.id}"]')
    page.wait_for_function(f"document.getElementById('d-id').textContent === '{evil.id}'")
    page.wait_for_selector("#turns .entry")
    assert EVIL in (page.locator("#turns").text_content() or "")
    assert page.locator("#turns script, #turns img").count() == 0
    assert page.evaluate("window.pwned === undefined")

    # A live background response, followed over SSE until its terminal event.
    live = client.responses.create(
        model="scripted",
        input="a slow and live one " * 3,
        background=True,
        metadata={"scripted_delay_ms": "60"},
    )
    page.click("#f-apply")
    page.wait_for_selector(f'#responses tbody tr[data-id="{live.id}"]')
    page.click(f'#responses tbody tr[data-id="{live.id}"]')
    page.wait_for_selector("#d-live[data-done]", timeout=60_000)
    assert page.locator("#d-live").get_attribute("data-done") == "response.completed"
    page.wait_for_function(
        "document.getElementById('d-live').textContent.startsWith('followed live')"
    )
    assert "completed" in (page.locator("#d-meta").text_content() or "")
    assert page.locator("#timeline svg rect.mark-terminal").count() == 1
    assert client.responses.retrieve(live.id).status == "completed"
    row = page.locator(f'#responses tbody tr[data-id="{live.id}"]')
    assert row.get_attribute("data-status") == "completed"

    # The picture in the docs: refreshed only when asked, so a test run leaves the tree clean.
    if server.kind == "postgres" and os.environ.get("RESPLOG_WRITE_SCREENSHOT") == "1":
        page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []


def test_a_conversation_opens_turn_by_turn(
    server: Server, client: openai.OpenAI, browser: Browser
) -> None:
    conv = client.conversations.create(items=[{"role": "user", "content": "Added first."}])
    client.responses.create(model="scripted", conversation=conv.id, input="Then <b>asked</b>.")
    other = client.conversations.create(items=[{"role": "user", "content": "Another one."}])
    page = browser.new_page(bypass_csp=True)
    page.goto(f"{server.base_url}/audit")
    # Listed (newest first), and opened from the list.
    row = page.locator(f'#conversations tbody tr[data-id="{conv.id}"]')
    row.wait_for()
    ids = page.locator("#conversations tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)")
    assert ids.index(other.id) < ids.index(conv.id)
    items = client.conversations.items.list(conv.id).data  # added, asked, and the answer
    assert row.locator("td").nth(3).text_content() == str(len(items))
    row.click()
    page.wait_for_function(f"document.getElementById('d-id').textContent === '{conv.id}'")
    turns = page.locator("#turns .turn")
    assert turns.count() == 2
    assert "Added first." in (turns.nth(0).text_content() or "")
    assert "Then <b>asked</b>." in (turns.nth(1).text_content() or "")
    assert page.locator("#turns b").count() == 0
    assert row.get_attribute("class") == "open"
    # Searched by time: a window after both holds neither.
    page.fill("#f-since", "2999-01-01T00:00:00")
    page.click("#f-apply")
    row.wait_for(state="detached")
    assert page.locator(f'#conversations tbody tr[data-id="{other.id}"]').count() == 0
    # And by id, through the open form.
    page.fill("#open-id", other.id)
    page.click("#open-go")
    page.wait_for_function(f"document.getElementById('d-id').textContent === '{other.id}'")
    assert "Another one." in (page.locator("#turns").text_content() or "")


def test_the_end_reason_and_conversation_filters_answer_as_json(
    client: openai.OpenAI, http: httpx.Client
) -> None:
    done = client.responses.create(model="scripted", input="done")
    failed = client.responses.create(
        model="scripted", input="fail", metadata={"scripted_mode": "fail"}
    )

    def listed(**params: str) -> list[str]:
        r = http.get("/audit/api/responses", params={"limit": "200", **params})
        assert r.status_code == 200, r.text
        return [row["id"] for row in r.json()["data"]]

    assert done.id in listed(reason="completed")
    assert failed.id not in listed(reason="completed")
    assert failed.id in listed(reason="engine_error")
    assert done.id not in listed(reason="engine_error")
    # An exact reason: neither a prefix nor a LIKE wildcard matches.
    assert failed.id not in listed(reason="engine")
    assert failed.id not in listed(reason="engine_erro_")
    assert listed(reason="engine_error", status="completed") == []
    bad = http.get("/audit/api/responses", params={"reason": "x%' OR 1=1"})
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "invalid_request_error"
    # Conversations: paged by `after`, newest first.
    a = client.conversations.create()
    b = client.conversations.create()
    first = http.get("/audit/api/conversations", params={"limit": "1"}).json()
    assert [c["id"] for c in first["data"]] == [b.id]
    assert first["has_more"] is True
    after = {"limit": "1", "after": first["last_id"]}
    assert [c["id"] for c in http.get("/audit/api/conversations", params=after).json()["data"]] == [
        a.id
    ]
    assert http.get("/audit/api/conversations", params={"after": "resp_x"}).status_code == 400


def test_a_bad_filter_and_an_unknown_id_are_openai_shaped(http: httpx.Client) -> None:
    r = http.get("/audit/api/responses", params={"status": "nonsense"})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = http.get("/audit/api/responses/resp_" + "0" * 48)
    assert r.status_code == 404
    assert "error" in r.json()
    assert http.post("/audit/api/responses").status_code == 404  # read-only
    page = http.get("/audit")
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_the_request_log_names_audit_routes_by_template(keyed: Server) -> None:
    rid = "resp_" + "1" * 48
    with httpx.Client(base_url=keyed.base_url) as http:
        r = http.get(f"/audit/api/responses/{rid}", headers={"authorization": "Bearer x"})
        assert r.status_code == 401
        http.get("/audit")
    log = keyed.log_text()
    assert "/audit/api/responses/{id}" in log
    assert rid not in log


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[Server]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'resplog.db'}"
    srv = start_server(
        url,
        "sqlite",
        tmp_path / "server.log",
        "--audit-view",
        "key",
        "--audit-key",
        "audit-secret-1",
    )
    yield srv
    stop_server(srv)


def test_key_mode_wants_the_audit_key(keyed: Server, browser: Browser) -> None:
    with httpx.Client(base_url=keyed.base_url) as http:
        assert http.get("/audit/api/responses").status_code == 401
        wrong = {"authorization": "Bearer nope"}
        assert http.get("/audit/api/responses", headers=wrong).status_code == 401
        right = {"authorization": "Bearer audit-secret-1"}
        assert http.get("/audit/api/responses", headers=right).status_code == 200
        assert http.get("/audit").status_code == 200  # the page itself holds no data
    assert "audit-secret-1" not in keyed.log_text()
    page = browser.new_page(bypass_csp=True)
    page.goto(f"{keyed.base_url}/audit")
    page.wait_for_selector("#key-form:not([hidden])")
    page.fill("#key", "audit-secret-1")
    page.click("#key-form button")
    page.wait_for_function("document.getElementById('error').hidden")


def test_off_is_a_404(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'resplog.db'}"
    srv = start_server(url, "sqlite", tmp_path / "server.log", "--audit-view", "off")
    try:
        with httpx.Client(base_url=srv.base_url) as http:
            assert http.get("/audit").status_code == 404
            assert http.get("/audit/api/responses").status_code == 404
    finally:
        stop_server(srv)
