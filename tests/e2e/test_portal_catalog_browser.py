"""The event catalog in the consumer portal, in a real browser (headless Chromium) against the dev
runtime: the catalog tab, the endpoint form offering the catalog's types, and "Send example".

The runtime, the browser and the applications are those of ``test_portal_browser`` (one of each
for this module). The tests run in file order: the first sees an empty catalog, the next ones
the types an admin token then adds.
"""

from __future__ import annotations

import json
import time

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

ORDER_PAID = {
    "name": "order.paid",
    "description": "A customer paid an order",
    "schema": {
        "type": "object",
        "required": ["id", "amount"],
        "properties": {
            "id": {"type": "string", "description": "The order's id"},
            "amount": {"type": "integer", "description": "In cents"},
            "customer": {"$ref": "#/$defs/customer"},
        },
        "$defs": {"customer": {"type": "object", "properties": {"email": {"type": "string"}}}},
    },
    "examples": [{"id": "ord_42", "amount": 1999, "customer": {"email": "ann@example.com"}}],
}


def test_with_an_empty_catalog_event_types_are_free_text(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    page.open(system.link())
    page.tab("catalog")
    page.wait(lambda: page.shown("catalog-empty"), "the empty catalog")
    page.tab("endpoints")
    page.click("add-endpoint")
    assert not page.shown("new-endpoint-type-picker")
    assert page.shown("new-endpoint-event-types")
    page.click("new-endpoint-cancel")


def test_the_catalog_shows_descriptions_fields_and_examples_but_no_archived_type(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    system.call("POST", "v1/event-types", ORDER_PAID, expect=201)
    system.call(
        "POST",
        "v1/event-types",
        {"name": "order.refunded", "description": "Money went back", "deprecated": True},
        expect=201,
    )
    system.call("POST", "v1/event-types", {"name": "legacy.thing"}, expect=201)
    system.call("PATCH", "v1/event-types/legacy.thing", {"archived": True})
    page.open(system.link())
    page.tab("catalog")
    entries = page.wait(
        lambda: page.all_by_testid("catalog-entry") or None, "the catalog's entries"
    )
    names = [entry.get_attribute("data-event-type") for entry in entries]
    assert names == ["order.paid", "order.refunded"]
    paid = entries[0]
    assert "A customer paid an order" in paid.text
    fields = {
        row.get_attribute("data-field"): row.text
        for row in page.all_by_testid("catalog-field", within=paid)
    }
    assert set(fields) == {"id", "amount", "customer", "customer.email"}
    assert "integer" in fields["amount"] and "yes" in fields["amount"]
    assert "In cents" in fields["amount"]
    (example,) = page.all_by_testid("catalog-example", within=paid)
    assert json.loads(example.text) == ORDER_PAID["examples"][0]
    refunded = entries[1]
    assert page.all_by_testid("deprecated-badge", within=refunded)
    assert page.all_by_testid("catalog-no-schema", within=refunded)
    page.screenshot("portal-catalog")


def test_the_endpoint_form_offers_the_catalogs_types(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    page.open(system.link())
    page.tab("endpoints")
    page.click("add-endpoint")
    page.wait(lambda: page.shown("new-endpoint-type-picker"), "the catalog's types")
    options = {
        box.get_attribute("data-event-type"): box
        for box in page.all_by_testid("type-option", within=page.by_id("new-endpoint-type-picker"))
    }
    assert {"order.paid", "order.refunded"} <= set(options)
    assert "legacy.thing" not in options
    page.fill("new-endpoint-url", system.receiver.url("ok/catalog"))
    options["order.paid"].click()
    assert page.by_id("new-endpoint-event-types").get_attribute("value") == "order.paid"
    # Free text stays possible beside the picked types.
    page.fill("new-endpoint-event-types", "order.paid, custom.thing")
    assert options["order.paid"].is_selected()
    page.click("new-endpoint-submit")
    page.wait(lambda: page.shown("created-secret"), "the created endpoint")
    page.click("created-secret-done")
    created = [
        e
        for e in system.call("GET", "v1/apps/acme/endpoints")["items"]
        if e["url"].endswith("/ok/catalog")
    ]
    assert [e["event_types"] for e in created] == [["custom.thing", "order.paid"]]
    system.ids["catalog_url"] = created[0]["url"]


def test_send_example_delivers_a_signed_message_marked_as_an_example(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    page.open(system.link())
    open_endpoint(page, system.ids["catalog_url"])
    page.wait(lambda: page.shown("send-example-form"), "the send-example form")
    choices = [o.get_attribute("value") for o in Select(page.by_id("send-example-type")).options]
    # Only the types that have an example.
    assert choices == ["order.paid"]
    page.click("send-example-submit")
    page.wait(lambda: page.text("send-example-result").startswith("Sent"), "the example sent")
    received = wait_for(
        lambda: system.receiver.requests_to("ok/catalog"), "the example at the receiver"
    )
    assert json.loads(received[0].body) == ORDER_PAID["examples"][0]
    assert received[0].headers.get("webhook-signature", "").startswith("v1,")
    page.by_testid("message-open", within=page.by_id("send-example-result")).click()
    page.wait(lambda: page.shown("message-detail"), "the example's message")
    assert page.by_testid("fact-sent-as").text == "An example from the event catalog"
    page.click("message-back")
    page.wait(lambda: page.all_by_testid("example-badge"), "the example in the deliveries")


def test_a_read_only_session_reads_the_catalog_and_sends_no_example(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    page.open(system.link(read_only=True))
    page.wait(lambda: page.shown("read-only-badge"), "the read-only session")
    page.tab("catalog")
    page.wait(lambda: len(page.all_by_testid("catalog-entry")) == 2, "the catalog")
    open_endpoint(page, system.ids["catalog_url"])
    time.sleep(0.5)
    assert not page.shown("send-example-form")
    status, _ = page.fetch(
        "PATCH", "v1/event-types/order.paid", body={"description": "changed by a customer"}
    )
    assert status == 403
    assert (
        system.call("GET", "v1/event-types/order.paid")["description"] == ORDER_PAID["description"]
    )
