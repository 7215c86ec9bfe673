"""The event catalog in the consumer portal, in a real browser (headless Chromium) against the dev
runtime: the catalog tab, the endpoint form offering the catalog's types, and "Send example".

The runtime, the browser and the applications are those of ``test_portal_browser`` (one of each
for this module, per test worker). The first test sees an empty catalog (it is the first of the
module on whichever worker runs it); each later one adds, through the API, what it needs that an
earlier one has not.
"""

from __future__ import annotations

import json
import time
from typing import Any

from selenium.webdriver.common.by import By
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


def catalogued(running: System) -> None:
    """The catalog the tests read: order.paid (with an example), order.refunded (deprecated,
    without), legacy.thing (archived)."""
    if running.ids.get("catalogued"):
        return
    running.call("POST", "v1/event-types", ORDER_PAID, expect=201)
    running.call(
        "POST",
        "v1/event-types",
        {"name": "order.refunded", "description": "Money went back", "deprecated": True},
        expect=201,
    )
    running.call("POST", "v1/event-types", {"name": "legacy.thing"}, expect=201)
    running.call("PATCH", "v1/event-types/legacy.thing", {"archived": True})
    running.ids["catalogued"] = True


def catalog_endpoint(running: System) -> str:
    """The URL of acme's endpoint subscribed to order.paid (made by the form's test, or here)."""
    if "catalog_url" not in running.ids:
        url = running.receiver.url("ok/catalog")
        running.call(
            "POST",
            "v1/apps/acme/endpoints",
            {"url": url, "event_types": ["order.paid", "custom.thing"]},
            expect=201,
        )
        running.ids["catalog_url"] = url
    return str(running.ids["catalog_url"])


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
    catalogued(system)
    page.open(system.link())
    page.tab("catalog")

    def shown() -> dict[str, Any] | None:
        # Read in one go, and again should the list be drawn anew meanwhile.
        entries = page.all_by_testid("catalog-entry")
        if len(entries) != 2:
            return None
        paid, refunded = entries
        return {
            "names": [entry.get_attribute("data-event-type") for entry in entries],
            "paid": paid.text,
            "fields": {
                row.get_attribute("data-field"): row.text
                for row in page.all_by_testid("catalog-field", within=paid)
            },
            "examples": [e.text for e in page.all_by_testid("catalog-example", within=paid)],
            "deprecated": bool(page.all_by_testid("deprecated-badge", within=refunded)),
            "no_schema": bool(page.all_by_testid("catalog-no-schema", within=refunded)),
        }

    catalog = page.wait(shown, "the catalog's entries")
    assert catalog["names"] == ["order.paid", "order.refunded"]
    assert "A customer paid an order" in catalog["paid"]
    fields = catalog["fields"]
    assert set(fields) == {"id", "amount", "customer", "customer.email"}
    assert "integer" in fields["amount"] and "yes" in fields["amount"]
    assert "In cents" in fields["amount"]
    (example,) = catalog["examples"]
    assert json.loads(example) == ORDER_PAID["examples"][0]
    assert catalog["deprecated"] and catalog["no_schema"]
    page.screenshot("portal-catalog")


def test_the_endpoint_form_offers_the_catalogs_types(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    catalogued(system)
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
    catalogued(system)
    page.open(system.link())
    open_endpoint(page, catalog_endpoint(system))
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
    catalogued(system)
    url = catalog_endpoint(system)
    page.open(system.link(read_only=True))
    page.wait(lambda: page.shown("read-only-badge"), "the read-only session")
    page.tab("catalog")
    page.wait(lambda: len(page.all_by_testid("catalog-entry")) == 2, "the catalog")
    open_endpoint(page, url)
    time.sleep(0.5)
    assert not page.shown("send-example-form")
    status, _ = page.fetch(
        "PATCH", "v1/event-types/order.paid", body={"description": "changed by a customer"}
    )
    assert status == 403
    assert (
        system.call("GET", "v1/event-types/order.paid")["description"] == ORDER_PAID["description"]
    )


def test_a_filter_is_tried_on_the_catalogs_example_of_a_type(
    system: System,  # noqa: F811
    page: PortalPage,  # noqa: F811
) -> None:
    catalogued(system)
    page.open(system.link())
    page.tab("endpoints")
    page.click("add-endpoint")
    page.by_testid("new-endpoint-preview").find_element(By.TAG_NAME, "summary").click()
    page.fill(
        "new-endpoint-filter", '{"amount": {"$gte": 1000}, "customer.email": {"$exists": true}}'
    )
    # A type the catalog has no example of says so, and leaves the payload alone.
    page.fill("new-endpoint-preview-type", "order.refunded")
    page.click("new-endpoint-preview-example")
    page.wait(
        lambda: "no example of order.refunded" in page.text("new-endpoint-preview-result"),
        "the missing example named",
    )
    assert page.by_id("new-endpoint-preview-payload").get_attribute("value") == ""
    page.fill("new-endpoint-preview-type", "order.paid")
    page.click("new-endpoint-preview-example")
    page.wait(
        lambda: page.by_id("new-endpoint-preview-payload").get_attribute("value"),
        "the example in the payload",
    )
    payload = page.by_id("new-endpoint-preview-payload").get_attribute("value")
    assert json.loads(payload) == ORDER_PAID["examples"][0]
    page.click("new-endpoint-preview-run")
    page.wait(
        lambda: page.text("new-endpoint-preview-result").startswith("Matches"),
        "the filter matching the example",
    )
    page.fill("new-endpoint-filter", '{"amount": {"$gte": 5000}}')
    page.click("new-endpoint-preview-run")
    page.wait(
        lambda: "/amount/$gte" in page.text("new-endpoint-preview-result"),
        "the clause that fails on the example",
    )
    page.click("new-endpoint-cancel")
