"""The consumer portal in a real browser: headless Chromium (Selenium) against the dev runtime.

One runtime for the module (its own migrated database, the API on a free port, the portal at
``<api>/portal``), one browser, and two applications: ``acme``, whose portal the tests use, and
``globex``, which the portal of ``acme`` must never show. Webhooks go to a receiver on loopback
that answers by path (``/ok`` 200, ``/status/500`` 500).

The tests run in file order and build on each other's data (the endpoint the first test creates
receives the events of the next ones). Screenshots of every page go to ``build/screenshots/``;
with ``TIDINGS_UPDATE_SCREENSHOTS=1``, those of the endpoints and deliveries pages are also
copied to ``docs/images/`` for the README (every screenshot is checked first: no signing secret
may be visible in it).
"""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select

from tests.e2e.portal_page import ENDED_MESSAGE, PortalPage, start_chromium
from tests.support.receivers import Receiver
from tidings.dal.connection import Database
from tidings.local.demo import DEMO_SETTINGS
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings
from tidings.logic.tokens import create_token

# One database and one browser for the module, whose tests build on each other's data: under
# pytest-xdist (make test: --dist loadgroup) they all run on one worker, in order.
pytestmark = pytest.mark.xdist_group("portal_browser")

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "layers" / "tidings" / "tidings" / "portal" / "static"
SCREENSHOTS = ROOT / "build" / "screenshots"
# The README's images are replaced only when asked for (ports and times differ on every run).
DOC_IMAGES = (
    ROOT / "docs" / "images" if os.environ.get("TIDINGS_UPDATE_SCREENSHOTS") == "1" else None
)

XSS_PAYLOAD = "<img src=x onerror=alert(1)>"
XSS_DESCRIPTION = "<b>bold</b>"
# Only globex's endpoint has this in its URL: it must never reach acme's portal.
GLOBEX_MARK = "globex-only-endpoint"
WRITE_CONTROLS = (
    "add-endpoint",
    "endpoint-toggle",
    "endpoint-delete",
    "reveal-secret",
    "rotate-secret",
    "edit-endpoint-form",
    "credentials-form",
    "recover-form",
)


@dataclass
class System:
    runtime: DevRuntime
    api_url: str
    admin_token: str
    receiver: Receiver
    db: Database
    ids: dict[str, Any] = field(default_factory=dict)

    def call(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        response = requests.request(
            method,
            f"{self.api_url}/{path.lstrip('/')}",
            json=body,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
        )
        assert response.status_code == expect, (method, path, response.status_code, response.text)
        return response.json() if response.content else None

    def link(self, app: str = "acme", *, read_only: bool = False, expires_in_s: int = 600) -> str:
        answer = self.call(
            "POST",
            f"v1/apps/{app}/portal-links",
            {"read_only": read_only, "expires_in_s": expires_in_s},
            expect=201,
        )
        assert answer["url"].startswith(f"{self.api_url}/portal#link="), answer
        assert answer["read_only"] is read_only
        return str(answer["url"])

    def send(self, event_type: str, payload: Any, app: str = "acme") -> None:
        self.call(
            "POST",
            f"v1/apps/{app}/events",
            {"event_type": event_type, "payload": payload},
            expect=202,
        )

    def messages(self, app: str = "acme", **query: str) -> list[dict[str, Any]]:
        params = "&".join(f"{key}={value}" for key, value in query.items())
        return list(self.call("GET", f"v1/apps/{app}/messages?limit=100&{params}")["items"])


def wait_for(condition: Any, what: str, timeout_s: float = 20.0, state: Any = None) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            seen = f"; {state()}" if state is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{seen}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def portal_database(postgres_admin_dsn: str) -> Iterator[str]:
    """One database for the module: the tests build on each other's data."""
    from tests.conftest import migrated_database

    with migrated_database(postgres_admin_dsn, "tidings_portal") as url:
        yield url


@pytest.fixture(scope="module")
def system(portal_database: str) -> Iterator[System]:
    receiver = Receiver()
    receiver.start()
    settings = dev_settings(dict(DEMO_SETTINGS), database_url=portal_database)
    runtime = DevRuntime(
        settings,
        RuntimeConfig(
            data_dir=Path(tempfile.mkdtemp(prefix="tidings-portal-")),
            port=0,
            serve_api=True,
            sender_environments=1,
            intervals_s={"percentiles": 2.0, "health_monitor": 5.0},
            alerts_stream=None,
            drain_timeout_s=1.0,
        ),
    )
    db = Database(portal_database)
    try:
        runtime.start()
        assert runtime.api is not None
        admin = create_token(db, scope="admin", description="portal browser tests")
        found = System(runtime, runtime.api.url, admin.token, receiver, db)
        found.call("POST", "v1/apps", {"uid": "acme", "name": "Acme Corp"}, expect=201)
        found.call("POST", "v1/apps", {"uid": "globex", "name": "Globex"}, expect=201)
        globex = found.call(
            "POST",
            "v1/apps/globex/endpoints",
            {"url": receiver.url(f"ok/{GLOBEX_MARK}"), "description": "globex secret project"},
            expect=201,
        )
        found.ids["globex_endpoint"] = globex["id"]
        found.send("globex.happened", {"globex": GLOBEX_MARK}, app="globex")
        yield found
    finally:
        runtime.stop()
        receiver.stop()
        db.close()


@pytest.fixture(scope="module")
def browser(system: System) -> Iterator[PortalPage]:
    driver = start_chromium()
    try:
        yield PortalPage(driver, system.api_url, SCREENSHOTS)
    finally:
        driver.quit()


@pytest.fixture
def page(browser: PortalPage) -> Iterator[PortalPage]:
    browser.driver.set_window_size(1280, 900)
    yield browser
    # Whatever the test did, the page's policy was never broken.
    assert browser.csp_violations() == []


def open_endpoint(page: PortalPage, url: str) -> None:
    page.tab("endpoints")
    page.wait(lambda: page.shown("endpoints-list-view"), "the endpoint list")

    def click_it() -> bool:
        # The list may be drawn again meanwhile (the tab reloads it): a button gone stale is
        # looked for again.
        button = next((b for b in page.all_by_testid("endpoint-open") if b.text == url), None)
        if button is None:
            return False
        button.click()
        return True

    page.wait(click_it, f"the endpoint {url} in the list")
    page.wait(lambda: page.text("endpoint-title") == url, "the endpoint's page")


def refresh_until_row(page: PortalPage, refresh_id: str, row_testid: str, test: Any) -> Any:
    def look() -> Any:
        rows = [row for row in page.all_by_testid(row_testid) if test(row)]
        if rows:
            return rows[0]
        page.by_id(refresh_id).click()
        time.sleep(0.3)
        return None

    return page.wait(look, f"a matching {row_testid}", timeout_s=25)


# -- the page and its files --------------------------------------------------------------------


def test_the_page_is_served_with_a_strict_policy(system: System) -> None:
    answer = requests.get(f"{system.api_url}/portal", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/html")
    policy = answer.headers.get("Content-Security-Policy", "")
    for directive in (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors",
    ):
        assert directive in policy, (directive, policy)
    assert "Set-Cookie" not in answer.headers
    assert 'src="portal/portal.js"' in answer.text
    assert 'href="portal/portal.css"' in answer.text
    for name, kind in (("portal.js", "javascript"), ("portal.css", "text/css")):
        asset = requests.get(f"{system.api_url}/portal/{name}", timeout=10)
        assert asset.status_code == 200, name
        assert kind in asset.headers["Content-Type"], (name, asset.headers["Content-Type"])
        assert asset.text == (STATIC / name).read_text(encoding="utf-8")


def test_the_files_keep_to_the_policy() -> None:
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    script = (STATIC / "portal.js").read_text(encoding="utf-8")
    css = (STATIC / "portal.css").read_text(encoding="utf-8")
    # No inline script, handler or style: the policy would refuse them.
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert re.findall(r"\son[a-z]+\s*=", html) == []
    assert "style=" not in html
    assert "<style" not in html
    # Nothing from elsewhere: no CDN, no web font, no absolute URL to fetch.
    for name, text in (("index.html", html), ("portal.js", script), ("portal.css", css)):
        assert re.findall(r"(?:src|href)\s*=\s*\"(?:https?:)?//", text) == [], name
        assert "@import" not in text and "@font-face" not in text, name
        assert "url(" not in text or name != "portal.css", name
    # Data reaches the page as text only; no string is ever code.
    for forbidden in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert forbidden not in script, forbidden
    assert "new Function" not in script
    assert "document.cookie" not in script
    assert "localStorage" not in script
    # Every call is relative to the page: no leading slash, no host.
    for called in re.findall(r"fetch\(\s*\"([^\"]*)\"", script):
        assert called.startswith("v1/"), called
    # Every form field has a label.
    for field_id in re.findall(r"<(?:input|select|textarea)[^>]*\bid=\"([^\"]+)\"", html):
        tag = re.search(rf"<(?:input|select|textarea)[^>]*\bid=\"{field_id}\"[^>]*>", html)
        assert tag is not None
        labelled = f'for="{field_id}"' in html or "aria-label=" in tag.group(0)
        assert labelled, f"#{field_id} has no label"


# -- the main flow -----------------------------------------------------------------------------


def test_a_link_opens_the_application_and_an_endpoint_receives_an_event(
    system: System, page: PortalPage
) -> None:
    page.open(system.link())
    assert page.shown("main"), page.body_text()
    # The credential left the address bar at once.
    assert "#" not in page.driver.current_url
    assert page.driver.current_url == f"{system.api_url}/portal"
    assert page.text("app-name") == "Acme Corp"
    assert page.text("app-uid") == "acme"
    assert page.text("session-expiry").startswith("Session expires")
    assert not page.shown("read-only-badge")
    stored = page.session()
    assert stored is not None
    assert stored["application"]["uid"] == "acme"
    assert page.driver.get_cookies() == []
    page.wait(lambda: page.shown("endpoints-empty"), "the empty endpoint list")

    # A refused URL is explained next to its field.
    page.click("add-endpoint")
    page.fill("new-endpoint-url", "http://10.1.2.3/hook")
    page.click("new-endpoint-submit")
    error = page.wait(
        lambda: page.text("new-endpoint-url-error"), "the URL's error next to its field"
    )
    assert "private" in error or "address" in error or "allowed" in error, error
    assert page.by_id("new-endpoint-url").get_attribute("aria-invalid") == "true"
    assert not page.shown("created-secret")

    # Created: its secret is shown once, with a copy button.
    url = system.receiver.url("ok")
    page.fill("new-endpoint-url", url)
    page.fill("new-endpoint-description", "Order service")
    page.fill("new-endpoint-event-types", "order.created, order.updated")
    Select(page.by_id("new-endpoint-payload-format")).select_by_value("envelope")
    page.click("new-endpoint-submit")
    page.wait(lambda: page.shown("created-secret"), "the created endpoint's secret")
    secret = page.by_id("created-secret-value").get_attribute("value")
    assert secret is not None and secret.startswith("whsec_")
    page.click("created-secret-copy")
    page.wait(lambda: "Cop" in page.status() or "select" in page.status(), "a copy answer")
    page.click("created-secret-done")
    assert not page.shown("created-secret")
    assert page.by_id("created-secret-value").get_attribute("value") == ""
    row = page.wait(
        lambda: next(iter(page.all_by_testid("endpoint-row")), None), "the endpoint's row"
    )
    assert url in row.text
    endpoint_id = int(row.get_attribute("data-endpoint-id") or 0)
    system.ids["ok_endpoint"] = endpoint_id
    system.ids["ok_url"] = url

    assert page.by_testid("endpoint-description", row).text == "Order service"

    # Events through the API, delivered to the receiver, seen in Deliveries.
    system.send("order.created", {"order": 42, "note": XSS_PAYLOAD})
    system.send("order.updated", {"order": 43, "lines": [{"sku": "A-1", "quantity": 2}]})
    wait_for(
        lambda: len(system.receiver.requests_to("ok")) == 2,
        "the receiver to get both events",
        timeout_s=20,
    )
    # The body chosen on the form: the envelope, naming the type as the header does.
    for request in system.receiver.requests_to("ok"):
        envelope = json.loads(request.body)
        assert set(envelope) == {"type", "timestamp", "data"}
        assert envelope["type"] == request.headers["webhook-event-type"]
    assert {r.headers["webhook-event-type"] for r in system.receiver.requests_to("ok")} == {
        "order.created",
        "order.updated",
    }
    # A second endpoint that always fails, with one retry a second after the first attempt.
    failing = system.call(
        "POST",
        "v1/apps/acme/endpoints",
        {
            "url": system.receiver.url("status/500"),
            "description": "Billing (always 500)",
            "event_types": ["invoice.paid"],
            "retry_schedule": [1],
        },
        expect=201,
    )
    system.ids["failing_endpoint"] = failing["id"]
    system.ids["failing_url"] = failing["url"]
    page.tab("endpoints")
    page.wait(lambda: len(page.all_by_testid("endpoint-row")) == 2, "both endpoints listed")
    page.screenshot("endpoints", publish_to=DOC_IMAGES and DOC_IMAGES / "portal-endpoints.png")

    page.tab("deliveries")
    delivered = refresh_until_row(
        page,
        "deliveries-refresh",
        "delivery-row",
        lambda row: row.get_attribute("data-status") == "delivered" and "order.created" in row.text,
    )
    message_id = int(delivered.get_attribute("data-message-id") or 0)
    system.ids["delivered_message"] = message_id
    assert "order.created" in delivered.text
    assert "Delivered" in delivered.text
    assert url in delivered.text
    # The message of globex's event is not among them.
    assert GLOBEX_MARK not in page.driver.page_source

    # The filter asks the API again: only this endpoint's delivered messages.
    Select(page.by_id("filter-endpoint")).select_by_value(str(endpoint_id))
    Select(page.by_id("filter-status")).select_by_value("delivered")
    page.fill("filter-event-type", "order.created")
    page.click("filter-apply")
    page.wait(
        lambda: (
            [r.get_attribute("data-message-id") for r in page.all_by_testid("delivery-row")]
            == [str(message_id)]
        ),
        "the filtered list",
    )
    # A window in the future (local time, sent as UTC) holds nothing.
    page.click("filter-reset")
    page.set_value("filter-since", "2999-01-01T00:00:00")
    page.click("filter-apply")
    page.wait(lambda: page.shown("deliveries-empty"), "an empty list for a future window")
    page.click("filter-reset")
    page.wait(lambda: len(page.all_by_testid("delivery-row")) == 2, "the whole list again")

    # The message's page: every attempt, the payload as text.
    opener = page.wait(
        lambda: next(
            (
                b
                for b in page.all_by_testid("message-open")
                if b.get_attribute("data-message-id") == str(message_id)
            ),
            None,
        ),
        "the message's button",
    )
    opener.click()
    page.wait(lambda: page.shown("message-detail"), "the message's page")
    assert page.text("message-title") == f"Message #{message_id}"
    attempts = page.all_by_testid("attempt-row")
    assert len(attempts) == 1
    assert page.by_testid("attempt-status-code", attempts[0]).text == "200"
    payload = page.by_id("message-payload").text
    assert XSS_PAYLOAD in payload
    assert '"order": 42' in payload
    assert page.text("message-waiting") != ""
    assert page.driver.find_elements(By.TAG_NAME, "img") == []
    page.screenshot("message")

    # Sent again on request: a second attempt, answered 200 too.
    page.click("message-resend")
    page.wait_status(f"Message #{message_id} will be sent again")
    wait_for(
        lambda: len(system.receiver.requests_to("ok")) == 3,
        "the receiver to get the message again",
    )

    def attempt_codes() -> list[str] | None:
        rows = page.all_by_testid("attempt-row")
        if len(rows) == 2:
            return [page.by_testid("attempt-status-code", row).text for row in rows]
        page.by_id("message-refresh").click()
        time.sleep(0.3)
        return None

    assert page.wait(attempt_codes, "the second attempt in the message's page") == ["200", "200"]
    page.click("message-back")
    page.wait(lambda: page.shown("deliveries-list-view"), "the deliveries list")


def test_a_dead_letter_is_replayed_from_the_page(system: System, page: PortalPage) -> None:
    page.open(system.link())
    failing = system.ids["failing_endpoint"]
    system.send("invoice.paid", {"invoice": 7})
    wait_for(
        lambda: system.messages(status="dead_letter", endpoint_id=str(failing)),
        "the failing endpoint's message to be a dead letter",
        timeout_s=25,
        state=system.messages,
    )
    page.tab("dead-letters")
    row = refresh_until_row(page, "dead-letters-refresh", "dead-row", lambda row: True)
    assert "invoice.paid" in row.text
    assert system.ids["failing_url"] in row.text
    assert "HTTP 500" in row.text
    page.screenshot("dead-letters")

    # Deliveries, for the README: delivered messages and the dead letter.
    page.tab("deliveries")
    refresh_until_row(
        page,
        "deliveries-refresh",
        "delivery-row",
        lambda row: row.get_attribute("data-status") == "dead_letter",
    )
    assert len(page.all_by_testid("delivery-row")) == 3
    page.screenshot("deliveries", publish_to=DOC_IMAGES and DOC_IMAGES / "portal-deliveries.png")
    page.tab("dead-letters")
    row = refresh_until_row(page, "dead-letters-refresh", "dead-row", lambda row: True)

    # Selecting enables "Replay selected"; replaying one row says how many were requeued.
    assert not page.by_id("replay-selected").is_enabled()
    page.by_testid("dead-check", row).click()
    page.wait(lambda: page.by_id("replay-selected").is_enabled(), "replay selected enabled")
    page.by_testid("dead-replay", row).click()
    page.wait_status("1 requeued")
    assert page.text("dead-letters-result") == "1 requeued"
    page.wait(lambda: page.shown("dead-empty"), "no dead letter left")

    # It fails again (the receiver still answers 500): back among the dead letters, and the
    # window form replays it by endpoint.
    wait_for(
        lambda: system.messages(status="dead_letter", endpoint_id=str(failing)),
        "the replayed message to be a dead letter again",
        timeout_s=25,
    )
    refresh_until_row(page, "dead-letters-refresh", "dead-row", lambda row: True)
    Select(page.by_id("replay-endpoint")).select_by_value(str(failing))
    page.set_value("replay-since", "2000-01-01T00:00:00")
    page.click("replay-window-submit")
    page.wait(lambda: page.text("dead-letters-result") == "1 requeued", "the window's replay")


def test_rotating_then_revealing_shows_the_same_secret(system: System, page: PortalPage) -> None:
    page.open(system.link())
    open_endpoint(page, system.ids["ok_url"])
    assert "Order service" in page.by_id("endpoint-facts").text
    # It answered at once: the fast lane, with no cap of its own.
    assert page.by_testid("lane-badge").text == "Fast lane"
    assert page.by_testid("fact-max-in-flight").text == "none of its own"
    assert not page.shown("secret-shown")
    page.wait(lambda: page.all_by_testid("hourly-chart"), "the endpoint's health")
    page.screenshot("endpoint")

    page.click("rotate-secret")
    page.click("rotate-yes")
    page.wait(lambda: page.shown("secret-shown"), "the new secret")
    rotated = page.by_id("secret-value").get_attribute("value")
    assert rotated is not None and rotated.startswith("whsec_")
    assert "previous secret" in page.text("secret-note")
    page.click("secret-hide")
    assert not page.shown("secret-shown")
    assert page.by_id("secret-value").get_attribute("value") == ""

    page.click("reveal-secret")
    page.wait(lambda: page.shown("secret-shown"), "the revealed secret")
    revealed = page.by_id("secret-value").get_attribute("value")
    assert revealed == rotated
    page.click("secret-copy")
    page.wait(lambda: "Cop" in page.status() or "select" in page.status(), "a copy answer")

    # Editing: a refused URL is shown by its field; a description is saved.
    page.fill("edit-endpoint-url", "ftp://example.com/hook")
    page.click("edit-endpoint-submit")
    page.wait(lambda: page.text("edit-endpoint-url-error"), "the URL's error")
    page.fill("edit-endpoint-url", system.ids["ok_url"])
    page.fill("edit-endpoint-description", XSS_DESCRIPTION)
    assert (
        Select(page.by_id("edit-endpoint-payload-format")).first_selected_option.get_attribute(
            "value"
        )
        == "envelope"
    )
    assert page.by_testid("fact-body").text == "envelope"
    Select(page.by_id("edit-endpoint-payload-format")).select_by_value("raw")
    page.click("edit-endpoint-submit")
    page.wait_status("Changes saved")
    assert page.by_testid("fact-body").text == "raw"
    # The description is text: shown literally, never markup.
    assert page.by_testid("fact-description").text == XSS_DESCRIPTION
    assert page.driver.find_elements(By.CSS_SELECTOR, "main b") == []

    # Disable, enable.
    page.click("endpoint-toggle")
    page.wait_status("Endpoint disabled")
    assert page.text("endpoint-toggle") == "Enable"
    page.click("endpoint-toggle")
    page.wait_status("Endpoint enabled")
    assert page.text("endpoint-toggle") == "Disable"

    # Recovering the endpoint's undelivered messages: there are none.
    page.set_value("recover-since", "2000-01-01T00:00:00")
    page.click("recover-submit")
    page.wait(lambda: page.text("recover-result") == "0 requeued", "the recovery's answer")

    # Back in the list, the description is text there too.
    page.click("endpoint-back")

    def row() -> Any:
        # Found again at every look: the list may be drawn again while the test reads it.
        return next(
            (
                r
                for r in page.all_by_testid("endpoint-row")
                if r.get_attribute("data-endpoint-id") == str(system.ids["ok_endpoint"])
            ),
            None,
        )

    page.wait(row, "the endpoint's row")
    page.wait(
        lambda: page.by_testid("endpoint-description", row()).text == XSS_DESCRIPTION,
        "the new description in the list",
    )
    assert page.driver.find_elements(By.CSS_SELECTOR, "main b") == []


def test_an_endpoint_is_deleted_after_a_confirmation(system: System, page: PortalPage) -> None:
    doomed = system.call(
        "POST",
        "v1/apps/acme/endpoints",
        {"url": system.receiver.url("ok/doomed"), "max_in_flight": 3},
        expect=201,
    )
    page.open(system.link())
    open_endpoint(page, doomed["url"])
    # It has not answered yet: the slow lane (untried), one delivery at a time.
    assert page.by_testid("lane-badge").text == "Slow lane"
    assert "has not answered yet" in page.by_testid("lane-explanation").text
    assert page.by_testid("fact-max-in-flight").text == "3"
    page.click("endpoint-delete")
    assert page.shown("endpoint-delete-confirm")
    page.click("endpoint-delete-no")
    assert not page.shown("endpoint-delete-confirm")
    page.click("endpoint-delete")
    page.click("endpoint-delete-yes")
    page.wait_status("Endpoint deleted")
    page.wait(lambda: page.shown("endpoints-list-view"), "the endpoint list")
    page.wait(lambda: len(page.all_by_testid("endpoint-row")) == 2, "two endpoints left")
    assert doomed["url"] not in page.by_id("endpoints-table").text
    system.call("GET", f"v1/apps/acme/endpoints/{doomed['id']}", expect=404)


def test_health_shows_every_endpoint(system: System, page: PortalPage) -> None:
    page.open(system.link())
    page.tab("health")
    cards = page.wait(
        lambda: cards if len(cards := page.all_by_testid("health-card")) == 2 else None,
        "a card per endpoint",
    )
    by_endpoint = {int(card.get_attribute("data-endpoint-id") or 0): card for card in cards}
    ok = by_endpoint[system.ids["ok_endpoint"]]
    assert page.by_testid("circuit-state", ok).text == "Circuit closed"
    assert page.by_testid("success-rate", ok).text == "100 %"
    chart = page.by_testid("hourly-chart", ok)
    label = chart.get_attribute("aria-label") or ""
    assert re.match(r"Last 24 hours: [23] delivered, 0 failed", label), label
    assert chart.get_attribute("role") == "img"
    assert len(chart.find_elements(By.CSS_SELECTOR, "g[data-hour]")) == 24
    failing = by_endpoint[system.ids["failing_endpoint"]]
    assert page.by_testid("success-rate", failing).text == "0 %"
    page.screenshot("health")


def test_the_tabs_work_from_the_keyboard(system: System, page: PortalPage) -> None:
    page.open(system.link())
    first = page.by_id("tab-endpoints")
    first.click()
    first.send_keys(Keys.ARROW_RIGHT)
    page.wait(lambda: page.shown("panel-deliveries"), "the deliveries panel")
    active = page.driver.switch_to.active_element
    assert active.get_attribute("id") == "tab-deliveries"
    assert active.get_attribute("aria-selected") == "true"
    assert first.get_attribute("aria-selected") == "false"
    assert first.get_attribute("tabindex") == "-1"
    active.send_keys(Keys.END)
    page.wait(lambda: page.shown("panel-catalog"), "the event catalog, the last tab")
    page.driver.switch_to.active_element.send_keys(Keys.HOME)
    page.wait(lambda: page.shown("panel-endpoints"), "the endpoints panel")


# -- what a session may see and do ---------------------------------------------------------------


def test_a_session_sees_nothing_of_another_application(system: System, page: PortalPage) -> None:
    page.open(system.link())
    for name in ("endpoints", "deliveries", "dead-letters", "health"):
        page.tab(name)
        time.sleep(0.5)
        assert GLOBEX_MARK not in page.driver.page_source, name
        assert "globex secret project" not in page.driver.page_source, name
    globex_endpoint = system.ids["globex_endpoint"]
    for path in (
        "v1/apps/globex/endpoints",
        f"v1/apps/globex/endpoints/{globex_endpoint}",
        "v1/apps/globex/messages",
        f"v1/apps/acme/endpoints/{globex_endpoint}",
    ):
        status, body = page.fetch("GET", path)
        assert status == 404, (path, status, body)
    status, body = page.fetch("GET", "v1/apps/globex/endpoints", token="tdg_not_a_real_token")
    assert status == 401, body


def test_an_expired_link_is_refused(system: System, page: PortalPage) -> None:
    link = system.link(expires_in_s=1)
    time.sleep(2)
    page.open(link)
    assert page.shown("ended")
    assert page.text("ended-message") == ENDED_MESSAGE
    assert not page.shown("main")
    assert page.session() is None
    assert "#" not in page.driver.current_url


def test_a_link_opens_one_session_only(system: System, page: PortalPage) -> None:
    link = system.link()
    page.open(link)
    assert page.shown("main")
    # A reload carries on with the stored session.
    page.reload()
    assert page.shown("main")
    assert page.text("app-name") == "Acme Corp"
    # The same link again, in a fresh session storage: refused.
    page.open(link, fresh=True)
    assert page.shown("ended")
    assert page.text("ended-message") == ENDED_MESSAGE
    assert page.session() is None
    # And with no link and no session, the same message.
    page.driver.get(f"{system.api_url}/portal")
    page.wait_settled()
    assert page.text("ended-message") == ENDED_MESSAGE


def test_an_ended_session_shows_the_message(system: System, page: PortalPage) -> None:
    page.open(system.link())
    assert page.shown("main")
    # The stored session says it is past its time: a reload refuses it.
    page.driver.execute_script(
        "const s = JSON.parse(sessionStorage.getItem('tidings.portal.session'));"
        " s.expires_at = '2000-01-01T00:00:00Z';"
        " sessionStorage.setItem('tidings.portal.session', JSON.stringify(s));"
    )
    page.reload()
    assert page.text("ended-message") == ENDED_MESSAGE
    assert page.session() is None
    # A token the API no longer accepts (401): the page drops it and says so.
    page.open(system.link())
    page.driver.execute_script(
        "const s = JSON.parse(sessionStorage.getItem('tidings.portal.session'));"
        " s.token = 'tdg_' + 'x'.repeat(43);"
        " sessionStorage.setItem('tidings.portal.session', JSON.stringify(s));"
    )
    page.reload()
    page.wait(lambda: page.shown("ended"), "the page to notice the refused token")
    assert page.text("ended-message") == ENDED_MESSAGE
    assert page.session() is None


def test_a_read_only_session_hides_every_change(system: System, page: PortalPage) -> None:
    page.open(system.link())
    assert page.shown("add-endpoint")
    writer = page.session_token()
    # A new link opened in the same tab (only the fragment changes) replaces the session.
    fragment = system.link(read_only=True).split("#", 1)[1]
    page.driver.execute_script("location.hash = arguments[0];", fragment)
    page.wait(lambda: page.shown("read-only-badge"), "the read-only session")
    page.wait_settled()
    assert page.session_token() != writer
    assert "#" not in page.driver.current_url
    assert page.shown("main")
    assert page.shown("read-only-badge")
    assert page.text("read-only-badge") == "read-only"
    page.wait(lambda: len(page.all_by_testid("endpoint-row")) == 2, "the endpoints")
    assert not page.shown("add-endpoint")
    open_endpoint(page, system.ids["ok_url"])
    for control in WRITE_CONTROLS:
        assert not page.shown(control), control
    page.tab("dead-letters")
    time.sleep(0.5)
    for control in ("replay-selected", "replay-window-form", "dead-select-all"):
        assert not page.shown(control), control
    assert page.all_by_testid("dead-check") == []
    assert page.all_by_testid("dead-replay") == []
    page.tab("deliveries")
    refresh_until_row(page, "deliveries-refresh", "delivery-row", lambda row: True)
    page.all_by_testid("message-open")[0].click()
    page.wait(lambda: page.shown("message-detail"), "a message's page")
    assert not page.shown("message-resend")
    page.click("message-back")

    # The API refuses what the page hides.
    endpoint = system.ids["ok_endpoint"]
    status, body = page.fetch(
        "PATCH", f"v1/apps/acme/endpoints/{endpoint}", body={"description": "changed"}
    )
    assert status == 403, body
    assert body["error"]["code"] == "forbidden", body
    status, body = page.fetch("GET", f"v1/apps/acme/endpoints/{endpoint}/secret")
    assert status == 403, body
    status, body = page.fetch("POST", "v1/apps/acme/dead-letters/replay", body={"endpoint_id": 1})
    assert status == 403, body


# -- receiver credentials ------------------------------------------------------------------------

REDACTED = "••••"


def secret_value(label: str) -> str:
    """A credential long enough (16 characters or more) for its redacted form to end in its last
    four characters, and unlike any other text of the page."""
    return f"portal-{label}-{secrets.token_hex(8)}"


def values_in_page(page: PortalPage, *values: str) -> list[str]:
    """Where any of ``values`` is in the page: its HTML, its text, or a field's value."""
    found = []
    source = page.driver.page_source
    text = page.body_text()
    fields = page.driver.execute_script(
        "return Array.from(document.querySelectorAll('input, textarea'), (f) => f.value);"
    )
    for value in values:
        if value in source:
            found.append(f"{value} in the HTML")
        if value in text:
            found.append(f"{value} in the text")
        if any(value in str(field) for field in fields):
            found.append(f"{value} in a field")
    return found


def test_receiver_credentials_are_set_redacted_sent_and_removed(
    system: System, page: PortalPage
) -> None:
    path = "ok/credentials"
    endpoint = system.call(
        "POST",
        "v1/apps/acme/endpoints",
        {"url": system.receiver.url(path), "event_types": ["credentials.checked"]},
        expect=201,
    )
    header_value, username, password = secret_value("key"), "portal-user", secret_value("pass")
    page.open(system.link())
    open_endpoint(page, endpoint["url"])
    assert page.by_testid("fact-static-headers").text == "none"
    assert page.by_testid("fact-authorization").text == "none"
    assert page.shown("credentials-form")

    # An empty form changes nothing; a line that is no header is explained next to its field.
    page.click("credentials-submit")
    page.wait(lambda: page.text("credentials-form-error") == "Nothing to change.", "no change")
    page.fill("credentials-headers", "no colon here")
    page.click("credentials-submit")
    page.wait(lambda: page.text("credentials-headers-error"), "the headers' error")
    assert page.by_id("credentials-headers").get_attribute("aria-invalid") == "true"

    # A static header and HTTP Basic, through the form.
    page.fill("credentials-headers", f"X-Api-Key: {header_value}")
    assert not page.shown("credentials-username")
    Select(page.by_id("credentials-auth")).select_by_value("basic")
    page.wait(lambda: page.shown("credentials-username"), "the Basic fields")
    assert not page.shown("credentials-token")
    page.fill("credentials-username", username)
    page.fill("credentials-password", password)
    page.click("credentials-submit")
    page.wait_status("Credentials saved")

    # (a) The page shows the redacted forms only, and nothing typed is kept in a field.
    assert page.by_testid("fact-static-headers").text == f"X-Api-Key: {REDACTED}{header_value[-4:]}"
    assert page.by_testid("fact-authorization").text == f"HTTP Basic ({username})"
    assert not page.shown("credentials-form-error")
    assert not page.shown("credentials-headers-error")
    assert not page.shown("credentials-username")
    assert Select(page.by_id("credentials-auth")).first_selected_option.get_attribute("value") == ""
    assert values_in_page(page, header_value, password) == []
    # Opened again, from what the API answers: still only the redacted forms.
    page.click("endpoint-back")
    open_endpoint(page, endpoint["url"])
    assert page.by_testid("fact-static-headers").text == f"X-Api-Key: {REDACTED}{header_value[-4:]}"
    assert values_in_page(page, header_value, password) == []

    # (b) The API shows them redacted too.
    shown = system.call("GET", f"v1/apps/acme/endpoints/{endpoint['id']}")
    assert shown["headers"] == {"X-Api-Key": REDACTED + header_value[-4:]}, shown
    assert shown["auth"] == {
        "type": "basic",
        "username": username,
        "password": REDACTED + password[-4:],
    }, shown
    assert header_value not in json.dumps(shown) and password not in json.dumps(shown)

    # (c) A delivery carries the header and the Authorization, in clear.
    system.send("credentials.checked", {"check": 1})
    received = wait_for(
        lambda: system.receiver.requests_to(path),
        "the receiver to get the event",
        timeout_s=15,
    )
    assert len(received) == 1, received
    assert received[0].headers["x-api-key"] == header_value
    basic = base64.b64encode(f"{username}:{password}".encode()).decode()
    assert received[0].headers["authorization"] == f"Basic {basic}"

    # Removing the static headers with their checkbox leaves the authorization as it is.
    page.by_id("credentials-remove-headers").click()
    page.click("credentials-submit")
    page.wait(lambda: page.by_testid("fact-static-headers").text == "none", "the headers removed")
    assert page.by_testid("fact-authorization").text == f"HTTP Basic ({username})"
    assert not page.by_id("credentials-remove-headers").is_selected()
    shown = system.call("GET", f"v1/apps/acme/endpoints/{endpoint['id']}")
    assert shown.get("headers") is None, shown
    assert shown["auth"]["type"] == "basic", shown
    system.call("DELETE", f"v1/apps/acme/endpoints/{endpoint['id']}", expect=204)


def test_a_read_only_session_sees_credentials_redacted_and_cannot_change_them(
    system: System, page: PortalPage
) -> None:
    header_value, token = secret_value("key"), secret_value("token")
    endpoint = system.call(
        "POST",
        "v1/apps/acme/endpoints",
        {
            "url": system.receiver.url("ok/credentials-read-only"),
            "event_types": ["credentials.read"],
            "headers": {"X-Api-Key": header_value},
            "auth": {"type": "bearer", "token": token},
        },
        expect=201,
    )
    page.open(system.link(read_only=True))
    assert page.shown("read-only-badge")
    open_endpoint(page, endpoint["url"])
    assert not page.shown("credentials-form")
    assert not page.shown("credentials-submit")
    assert page.by_testid("fact-static-headers").text == f"X-Api-Key: {REDACTED}{header_value[-4:]}"
    assert page.by_testid("fact-authorization").text == f"Bearer token {REDACTED}{token[-4:]}"
    assert values_in_page(page, header_value, token) == []
    # The API refuses what the page hides.
    status, body = page.fetch(
        "PATCH", f"v1/apps/acme/endpoints/{endpoint['id']}", body={"headers": None}
    )
    assert status == 403, body
    assert system.call("GET", f"v1/apps/acme/endpoints/{endpoint['id']}")["headers"] == {
        "X-Api-Key": REDACTED + header_value[-4:]
    }
    system.call("DELETE", f"v1/apps/acme/endpoints/{endpoint['id']}", expect=204)


def test_the_page_fits_a_phone(system: System, page: PortalPage) -> None:
    # Its own endpoint and delivery: the test may run on a worker where no other test of this
    # module made any.
    path = "ok/phone"
    endpoint = system.call(
        "POST",
        "v1/apps/acme/endpoints",
        {"url": system.receiver.url(path), "event_types": ["phone.checked"]},
        expect=201,
    )
    system.send("phone.checked", {"check": 1})
    wait_for(lambda: len(system.receiver.requests_to(path)) == 1, "the phone check's delivery")
    page.open(system.link())
    page.driver.set_window_size(390, 844)
    try:
        inner = page.driver.execute_script("return window.innerWidth;")
        assert inner <= 400, inner
        for name in ("endpoints", "deliveries", "dead-letters", "health"):
            page.tab(name)
            time.sleep(0.4)
            scroll, width = page.no_horizontal_overflow()
            assert scroll <= width, (name, scroll, width)
        page.tab("deliveries")
        refresh_until_row(page, "deliveries-refresh", "delivery-row", lambda row: True)
        page.all_by_testid("message-open")[0].click()
        page.wait(lambda: page.shown("message-detail"), "a message's page")
        scroll, width = page.no_horizontal_overflow()
        assert scroll <= width, ("message", scroll, width)
        open_endpoint(page, endpoint["url"])
        scroll, width = page.no_horizontal_overflow()
        assert scroll <= width, ("endpoint", scroll, width)
        page.screenshot("phone-endpoint")
    finally:
        page.driver.set_window_size(1280, 900)
        system.call("DELETE", f"v1/apps/acme/endpoints/{endpoint['id']}", expect=204)


def test_an_endpoint_gets_a_filter_and_channels_and_the_filter_is_tried_first(
    system: System, page: PortalPage
) -> None:
    page.open(system.link())
    page.tab("endpoints")
    page.wait(lambda: page.shown("endpoints-list-view"), "the endpoint list")
    page.click("add-endpoint")
    url = system.receiver.url("ok/filtered")
    page.fill("new-endpoint-url", url)
    page.fill("new-endpoint-channels", "eu, vip")

    # Not JSON, then a filter the API refuses: each explained next to the field.
    page.fill("new-endpoint-filter", "{not json")
    page.click("new-endpoint-submit")
    error = page.wait(lambda: page.text("new-endpoint-filter-error"), "the filter's error")
    assert "not valid JSON" in error
    page.fill("new-endpoint-filter", '{"total": {"$regex": "^1"}}')
    page.click("new-endpoint-submit")
    error = page.wait(
        lambda: (
            "$regex" in page.text("new-endpoint-filter-error")
            and page.text("new-endpoint-filter-error")
        ),
        "the API's refusal of $regex",
    )
    assert "filter/total/$regex" in error
    assert not page.shown("created-secret")

    # Tried on pasted payloads before it is saved.
    page.fill("new-endpoint-filter", '{"total": {"$gte": 100}}')
    page.by_testid("new-endpoint-preview").find_element(By.TAG_NAME, "summary").click()
    page.fill("new-endpoint-preview-type", "order.paid")
    page.fill("new-endpoint-preview-payload", '{"total": 42}')
    page.click("new-endpoint-preview-run")
    missed = page.wait(
        lambda: (
            "match" in page.text("new-endpoint-preview-result")
            and page.text("new-endpoint-preview-result")
        ),
        "the preview's verdict",
    )
    assert missed.startswith("Does not match") and "/total/$gte ($gte)" in missed
    page.fill("new-endpoint-preview-payload", '{"total": 150}')
    page.click("new-endpoint-preview-run")
    page.wait(
        lambda: page.text("new-endpoint-preview-result").startswith("Matches"),
        "the preview to match",
    )

    page.click("new-endpoint-submit")
    page.wait(lambda: page.shown("created-secret"), "the created endpoint's secret")
    page.click("created-secret-done")
    open_endpoint(page, url)
    assert page.by_testid("fact-channels").text == "eu, vip"
    assert page.by_testid("fact-filter").text == '{"total":{"$gte":100}}'
    endpoint_id = next(
        e["id"] for e in system.call("GET", "v1/apps/acme/endpoints")["items"] if e["url"] == url
    )
    shown = system.call("GET", f"v1/apps/acme/endpoints/{endpoint_id}")
    assert (shown["filter"], shown["channels"]) == ({"total": {"$gte": 100}}, ["eu", "vip"])

    # Emptied in the form: both removed.
    assert json.loads(page.by_id("edit-endpoint-filter").get_attribute("value") or "") == {
        "total": {"$gte": 100}
    }
    page.fill("edit-endpoint-channels", "")
    page.fill("edit-endpoint-filter", "")
    page.click("edit-endpoint-submit")
    page.wait_status("Changes saved.")
    shown = system.call("GET", f"v1/apps/acme/endpoints/{endpoint_id}")
    assert (shown["filter"], shown["channels"]) == (None, [])
    assert page.by_testid("fact-filter").text == "none"
