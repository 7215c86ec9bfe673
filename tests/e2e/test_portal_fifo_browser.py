"""Ordered delivery in the consumer portal, in a real browser (headless Chromium) against the dev
runtime: a FIFO endpoint made and changed through the forms, and a line paused at a dead letter
shown on the endpoint's page and resumed from there.

The runtime, the browser and the applications are those of ``test_portal_browser`` (one of each
for this module). Each test makes the endpoints it needs and sends their events to them alone
(``endpoint_ids``), so that the tests do not depend on each other.
"""

from __future__ import annotations

import json
from typing import Any

from selenium.webdriver.support.select import Select

from tests.e2e.portal_page import PortalPage
from tests.e2e.test_portal_browser import (  # noqa: F401 - the fixtures
    System,
    browser,
    open_endpoint,
    page,
    portal_database,
    system,
    wait_for,
)

KEY = "cust-1"


def endpoint_of(running: System, url: str) -> dict[str, Any]:
    found = [e for e in running.call("GET", "v1/apps/acme/endpoints")["items"] if e["url"] == url]
    assert len(found) == 1, found
    return dict(found[0])


def send_to(running: System, endpoint_id: int, seq: int, key: str | None) -> None:
    event: dict[str, Any] = {
        "event_type": "ledger.entry",
        "payload": {"seq": seq, "key": key},
        "endpoint_ids": [endpoint_id],
    }
    if key is not None:
        event["ordering_key"] = key
    running.call("POST", "v1/apps/acme/events", event, expect=202)


def lines_of(running: System, endpoint_id: int, *, paused: bool = False) -> list[dict[str, Any]]:
    flag = "true" if paused else "false"
    answer = running.call("GET", f"v1/apps/acme/endpoints/{endpoint_id}/lines?paused={flag}")
    return list(answer["items"])


def shown_lines(portal: PortalPage) -> list[dict[str, Any]]:
    """The lines table as shown, a row at a time, read in one go."""
    rows = []
    for row in portal.all_by_testid("line-row"):
        heads = portal.all_by_testid("message-open", within=row)
        rows.append(
            {
                "key": portal.by_testid("line-key", row).text,
                "keyless": row.get_attribute("data-keyless") == "true",
                "paused": row.get_attribute("data-paused") == "true",
                "head": int(heads[0].get_attribute("data-message-id") or 0) if heads else None,
                "status": portal.by_testid("line-status", row).text,
                "waiting": portal.by_testid("line-waiting", row).text,
                "paused_at": portal.by_testid("line-paused-at", row).text,
                "resume": len(portal.all_by_testid("line-resume", within=row)),
            }
        )
    return rows


def select_value(portal: PortalPage, element_id: str) -> str:
    return str(Select(portal.by_id(element_id)).first_selected_option.get_attribute("value"))


def to_endpoint(portal: PortalPage, url: str) -> None:
    """The endpoint's page, from wherever the portal is (its list first, if another endpoint's
    page is open)."""
    portal.tab("endpoints")
    if portal.shown("endpoint-detail"):
        portal.click("endpoint-back")
    open_endpoint(portal, url)


def refresh_lines(portal: PortalPage) -> None:
    """Asks for the lines again, and waits until they are drawn."""
    before = portal.by_id("lines-section").get_attribute("data-loads")
    portal.click("lines-refresh")
    portal.wait(
        lambda: portal.by_id("lines-section").get_attribute("data-loads") != before,
        "the lines drawn again",
    )


def payload_of(body: bytes) -> dict[str, Any]:
    """A webhook's event payload, whether it came raw or in the envelope."""
    sent = json.loads(body)
    return dict(sent["data"]) if set(sent) == {"type", "timestamp", "data"} else dict(sent)


def test_a_fifo_endpoint_is_made_and_changed_through_the_forms(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    page.open(system.link())
    page.tab("endpoints")
    page.wait(lambda: page.shown("endpoints-list-view"), "the endpoint list")
    page.click("add-endpoint")
    url = system.receiver.url("ok/fifo-form")
    page.fill("new-endpoint-url", url)
    page.fill("new-endpoint-event-types", "ledger.form")

    # The FIFO options appear once FIFO is chosen.
    assert select_value(page, "new-endpoint-ordering") == "none"
    assert not page.shown("new-endpoint-fifo")
    Select(page.by_id("new-endpoint-ordering")).select_by_value("fifo")
    page.wait(lambda: page.shown("new-endpoint-fifo"), "the FIFO options")
    assert "one message of a line at a time" in page.text("new-endpoint-ordering")
    assert "JSON array" in page.text("new-endpoint-fifo-batch-size-hint")
    assert "until you resume" in page.text("new-endpoint-fifo-on-dead-letter-hint")

    # A batch size out of range is explained next to its field, and nothing is made.
    page.fill("new-endpoint-fifo-batch-size", "101")
    page.click("new-endpoint-submit")
    error = page.wait(
        lambda: page.text("new-endpoint-fifo-batch-size-error"), "the batch size's error"
    )
    assert "1 to 100" in error
    assert page.by_id("new-endpoint-fifo-batch-size").get_attribute("aria-invalid") == "true"
    assert not page.shown("created-secret")

    page.fill("new-endpoint-fifo-batch-size", "10")
    # Corrected, it is no longer shown as refused.
    page.wait(lambda: not page.shown("new-endpoint-fifo-batch-size-error"), "the error cleared")
    assert page.by_id("new-endpoint-fifo-batch-size").get_attribute("aria-invalid") is None
    Select(page.by_id("new-endpoint-fifo-on-dead-letter")).select_by_value("pause")
    page.driver.execute_script(
        "arguments[0].scrollIntoView({block: 'center'});", page.by_id("new-endpoint-ordering")
    )
    page.screenshot("fifo-form")
    page.click("new-endpoint-submit")
    page.wait(lambda: page.shown("created-secret"), "the created endpoint's secret")
    page.click("created-secret-done")
    # The form was emptied: FIFO options hidden again for the next endpoint.
    assert select_value(page, "new-endpoint-ordering") == "none"

    made = endpoint_of(system, url)
    assert (made["ordering"], made["fifo_batch_size"], made["fifo_on_dead_letter"]) == (
        "fifo",
        10,
        "pause",
    )
    row = page.wait(
        lambda: next(
            (r for r in page.all_by_testid("endpoint-row") if url in r.text),
            None,
        ),
        "the endpoint's row",
    )
    assert page.by_testid("fifo-badge", row).text == "FIFO"

    # Its page says how it delivers, and shows its (empty) lines.
    open_endpoint(page, url)
    assert page.by_testid("fact-ordering").text.startswith("FIFO")
    assert page.by_testid("fact-batch-size").text == (
        "up to 10 messages of a line a request, as a JSON array"
    )
    assert page.by_testid("fact-on-a-dead-letter").text.startswith("pause the line")
    assert page.by_testid("fact-paused-lines").text == "none"
    assert page.shown("lines-section")
    page.wait(lambda: page.shown("lines-empty"), "no line yet")
    assert not page.shown("lines-resume-all")

    # The edit form starts from what is saved.
    assert select_value(page, "edit-endpoint-ordering") == "fifo"
    assert page.shown("edit-endpoint-fifo")
    assert page.by_id("edit-endpoint-fifo-batch-size").get_attribute("value") == "10"
    assert select_value(page, "edit-endpoint-fifo-on-dead-letter") == "pause"
    page.fill("edit-endpoint-fifo-batch-size", "3")
    Select(page.by_id("edit-endpoint-fifo-on-dead-letter")).select_by_value("continue")
    page.click("edit-endpoint-submit")
    page.wait_status("Changes saved.")
    page.wait(
        lambda: page.by_testid("fact-batch-size").text.startswith("up to 3 messages"),
        "the new batch size",
    )
    assert page.by_testid("fact-on-a-dead-letter").text.startswith("continue")
    changed = endpoint_of(system, url)
    assert (changed["ordering"], changed["fifo_batch_size"], changed["fifo_on_dead_letter"]) == (
        "fifo",
        3,
        "continue",
    )

    # Back to no ordering: the FIFO options and the lines go; the options are kept as they were.
    Select(page.by_id("edit-endpoint-ordering")).select_by_value("none")
    page.wait(lambda: not page.shown("edit-endpoint-fifo"), "the FIFO options hidden")
    page.click("edit-endpoint-submit")
    page.wait(lambda: page.by_testid("fact-ordering").text.startswith("none"), "the ordering saved")
    assert not page.shown("lines-section")
    assert page.all_by_testid("fact-batch-size") == []
    assert endpoint_of(system, url)["ordering"] == "none"
    assert endpoint_of(system, url)["fifo_batch_size"] == 3
    system.call("DELETE", f"v1/apps/acme/endpoints/{made['id']}", expect=204)


def test_a_paused_line_is_shown_and_resumed(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    # A FIFO endpoint that pauses at a dead letter, whose receiver refuses everything (400).
    refusing = "status/400/fifo-lines"
    endpoint = system.call(
        "POST",
        "v1/apps/acme/endpoints",
        {
            "url": system.receiver.url(refusing),
            "description": "Ledger (FIFO)",
            "event_types": ["ledger.entry"],
            "ordering": "fifo",
            "fifo_on_dead_letter": "pause",
        },
        expect=201,
    )
    endpoint_id = int(endpoint["id"])
    # Three events of one customer, and one without a key: each line pauses at its first.
    for seq in (1, 2, 3):
        send_to(system, endpoint_id, seq, KEY)
    send_to(system, endpoint_id, 4, None)
    paused = wait_for(
        lambda: (found := lines_of(system, endpoint_id, paused=True)) and len(found) == 2 and found,
        "both lines to pause at their dead letters",
        timeout_s=30,
        state=lambda: lines_of(system, endpoint_id),
    )
    by_key = {line["ordering_key"]: line for line in paused}
    assert set(by_key) == {KEY, None}
    assert (by_key[KEY]["waiting"], by_key[None]["waiting"]) == (2, 0)
    assert {by_key[KEY]["head_status"], by_key[None]["head_status"]} == {"dead_letter"}
    head = int(by_key[KEY]["head_message_id"])
    keyless_head = int(by_key[None]["head_message_id"])

    # A read-only session sees the lines, but no Resume.
    page.open(system.link(read_only=True))
    open_endpoint(page, endpoint["url"])
    page.wait(lambda: len(shown_lines(page)) == 2, "the two lines")
    assert [line["resume"] for line in shown_lines(page)] == [0, 0]
    assert not page.shown("lines-resume-all")
    status, body = page.fetch("POST", f"v1/apps/acme/endpoints/{endpoint_id}/lines/resume", body={})
    assert status == 403, body

    # A session that may replay: both lines paused, each with its Resume, and Resume all.
    page.open(system.link())
    open_endpoint(page, endpoint["url"])
    lines = page.wait(
        lambda: (found := shown_lines(page)) and len(found) == 2 and found, "the two lines"
    )
    customer = next(line for line in lines if not line["keyless"])
    keyless = next(line for line in lines if line["keyless"])
    assert customer["key"] == KEY and customer["head"] == head
    assert customer["paused"] and customer["resume"] == 1
    assert "Dead letter" in customer["status"] and "Line paused" in customer["status"]
    assert customer["waiting"] == "2"
    assert customer["paused_at"] != "—"
    assert keyless["key"] == "no key" and keyless["paused"] and keyless["waiting"] == "0"
    assert page.by_testid("fact-paused-lines").text == "2 lines at a dead letter: show them"
    assert page.text("lines-paused-note").startswith("2 lines are paused at a dead letter")
    assert page.text("lines-resume-all") == "Resume all paused lines (2)"
    # The endpoint's page from its title to its lines, in a window tall enough for both.
    page.driver.set_window_size(1280, 1700)
    try:
        page.driver.execute_script("window.scrollTo(0, 0);")
        page.screenshot("fifo-paused-lines")
    finally:
        page.driver.set_window_size(1280, 900)
    # On a phone the page does not scroll sideways (the lines' table scrolls in its box).
    page.driver.set_window_size(390, 844)
    try:
        page.wait(lambda: page.driver.execute_script("return window.innerWidth;") <= 400, "a phone")
        scroll, width = page.no_horizontal_overflow()
        assert scroll <= width, (scroll, width)
        page.driver.execute_script(
            "arguments[0].scrollIntoView({block: 'start'});", page.by_id("lines-section")
        )
        page.screenshot("phone-fifo-lines")
    finally:
        page.driver.set_window_size(1280, 900)
    # "show them" leads to the lines.
    page.by_testid("show-paused-lines").click()
    page.wait(
        lambda: page.driver.switch_to.active_element.get_attribute("id") == "lines-heading",
        "the lines' heading focused",
    )

    # "Paused lines only" asks the API again.
    Select(page.by_id("lines-filter")).select_by_value("paused")
    page.wait(lambda: len(shown_lines(page)) == 2, "the paused lines")
    Select(page.by_id("lines-filter")).select_by_value("")

    # The head is the dead letter that paused the line; behind it, messages wait.
    page.wait(lambda: len(shown_lines(page)) == 2, "every line again")
    opener = next(
        button
        for button in page.all_by_testid("message-open")
        if button.get_attribute("data-message-id") == str(head)
    )
    opener.click()
    page.wait(lambda: page.text("message-title") == f"Message #{head}", "the head's page")
    assert page.by_testid("fact-status").text == "Dead letter"
    assert page.by_testid("fact-ordering-key").text == KEY
    assert "paused its FIFO line" in page.text("message-waiting")
    assert not page.shown("message-resume-line")

    page.click("message-back")
    Select(page.by_id("filter-endpoint")).select_by_value(str(endpoint_id))
    Select(page.by_id("filter-status")).select_by_value("waiting")
    page.click("filter-apply")
    rows = page.wait(
        lambda: (found := page.all_by_testid("delivery-row")) and len(found) == 2 and found,
        "the two waiting messages",
    )
    assert {row.get_attribute("data-status") for row in rows} == {"waiting"}
    assert all("Waiting" in row.text for row in rows)
    waiting_id = min(int(row.get_attribute("data-message-id") or 0) for row in rows)
    next(
        button
        for button in page.all_by_testid("message-open")
        if button.get_attribute("data-message-id") == str(waiting_id)
    ).click()
    page.wait(lambda: page.text("message-title") == f"Message #{waiting_id}", "its page")
    assert page.by_testid("fact-status").text == "Waiting"
    assert page.by_testid("fact-ordering-key").text == KEY
    assert page.by_testid("fact-next-attempt").text.startswith("once the messages before it")
    explanation = page.text("message-waiting")
    assert explanation.startswith("Its FIFO line (ordering key 'cust-1') is paused since")
    assert f"message {head}" in explanation and explanation.endswith(".")
    assert page.by_id("message-waiting").get_attribute("data-reason") == "line_paused"
    assert page.shown("message-resume-line")
    page.screenshot("fifo-waiting-message")

    # The receiver is fixed; then the customer's line is resumed from the endpoint's page.
    fixed = "ok/fifo-lines"
    system.call(
        "PATCH",
        f"v1/apps/acme/endpoints/{endpoint_id}",
        {"url": system.receiver.url(fixed)},
    )
    to_endpoint(page, system.receiver.url(fixed))
    row = page.wait(
        lambda: next(
            (
                r
                for r in page.all_by_testid("line-row")
                if r.get_attribute("data-ordering-key") == KEY
            ),
            None,
        ),
        "the customer's line",
    )
    page.by_testid("line-resume", row).click()
    page.wait_status(f'The line of ordering key "{KEY}" is resumed.')
    # Behind the dead letter, the two waiting messages arrive, in order.
    delivered = wait_for(
        lambda: (found := system.receiver.requests_to(fixed)) and len(found) == 2 and found,
        "the two messages behind the dead letter",
        timeout_s=30,
    )
    assert [payload_of(r.body)["seq"] for r in delivered] == [2, 3]
    assert system.call("GET", f"v1/apps/acme/endpoints/{endpoint_id}")["paused_lines"] == 1

    def only_keyless() -> bool:
        found = shown_lines(page)
        if len(found) == 1 and found[0]["keyless"]:
            return True
        refresh_lines(page)
        return False

    page.wait(only_keyless, "the customer's line to be done", timeout_s=25)
    assert page.by_testid("fact-paused-lines").text == "1 line at a dead letter: show it"
    assert page.text("lines-resume-all") == "Resume the paused line"

    # Resume all: the last paused line goes on; nothing waits behind it, so it is done.
    page.click("lines-resume-all")
    page.wait_status("The line of events without an ordering key is resumed.")
    page.wait(lambda: page.shown("lines-empty"), "no line left")
    assert not page.shown("lines-resume-all")
    assert not page.shown("lines-paused-note")
    assert page.by_testid("fact-paused-lines").text == "none"
    assert lines_of(system, endpoint_id) == []
    # The dead letters stay, to replay.
    dead = system.messages(status="dead_letter", endpoint_id=str(endpoint_id))
    assert sorted(m["id"] for m in dead) == sorted([head, keyless_head])
    system.call("DELETE", f"v1/apps/acme/endpoints/{endpoint_id}", expect=204)
