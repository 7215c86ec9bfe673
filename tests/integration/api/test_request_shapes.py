"""Every request is answered in the documented shape: bodies that are not JSON are 415 in the
error shape (a multipart type without its boundary once was a 500), and so is a body without a
content type (never parsed: a web page can send one without the browser asking first); JSON with
parameters or in any case is read as JSON."""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import Api, Gateway, count
from tidings.dal.connection import Database
from tidings.logic import tokens


@pytest.mark.parametrize(
    "content_type",
    [
        "multipart/form-data",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "text/plain",
        "application/json-patch+json",
        "application/jsonl",
    ],
)
def test_bodies_that_are_not_json_are_415(api: Api, db: Database, content_type: str) -> None:
    endpoint = api.create_endpoint()
    for method, path in (
        ("PATCH", f"/v1/endpoints/{endpoint['id']}"),
        ("POST", "/v1/endpoints"),
        ("POST", "/v1/events"),
        ("POST", "/v1/apps/default/dead-letters/replay"),
        ("POST", "/v1/apps"),
    ):
        reply = api.call(method, path, raw_body='{"description": "x"}', content_type=content_type)
        assert (reply.status, reply.error["code"]) == (415, "unsupported_media_type"), path
        empty = api.call(method, path, raw_body="", content_type=content_type)
        assert empty.status == 415, path
    assert count(db, "endpoints") == 1
    assert api.get(f"/v1/endpoints/{endpoint['id']}").body["description"] == ""


def test_json_is_json_with_parameters_or_in_any_case(api: Api) -> None:
    endpoint = api.create_endpoint()
    for content_type in ("application/json; charset=utf-8", "Application/JSON"):
        reply = api.call(
            "PATCH",
            f"/v1/endpoints/{endpoint['id']}",
            raw_body='{"description": "ok"}',
            content_type=content_type,
        )
        assert reply.status == 200, (content_type, reply.raw)


BODY_ROUTES = (
    ("POST", "/v1/events"),
    ("POST", "/v1/apps/default/events/batch"),
    ("POST", "/v1/endpoints"),
    ("POST", "/v1/apps/default/dead-letters/replay"),
    ("POST", "/v1/apps"),
    ("POST", "/v1/tokens"),
    ("POST", "/v1/portal-links"),
)


@pytest.mark.parametrize("content_type", [None, "", " ", "; charset=utf-8"])
def test_a_body_without_a_content_type_is_415_and_never_read(
    api: Api, db: Database, content_type: str | None
) -> None:
    endpoint = api.create_endpoint()
    applications = count(db, "applications")
    routes = (
        *BODY_ROUTES,
        ("PATCH", f"/v1/endpoints/{endpoint['id']}"),
        ("POST", f"/v1/endpoints/{endpoint['id']}/recover"),
    )
    bodies = (
        '{"scope": "admin", "url": "https://93.184.215.14/x", "uid": "a", "name": "a"}',
        "",
        None,
    )
    for method, path in routes:
        for body in bodies:
            reply = api.call(method, path, raw_body=body, content_type=content_type)
            assert (reply.status, reply.error["code"]) == (415, "unsupported_media_type"), (
                path,
                body,
            )
    assert count(db, "endpoints") == 1 and count(db, "tokens") == 0
    assert count(db, "applications") == applications


def test_a_post_without_a_body_needs_no_content_type(api: Api) -> None:
    """Routes that read no body (rotate a secret, resend a message) are called with none."""
    endpoint = api.create_endpoint()
    rotated = api.call("POST", f"/v1/endpoints/{endpoint['id']}/rotate-secret", content_type=None)
    assert rotated.status == 200, rotated.raw
    # ... but a body sent to them must still say it is JSON.
    sent = api.call(
        "POST",
        f"/v1/endpoints/{endpoint['id']}/rotate-secret",
        raw_body="{}",
        content_type=None,
    )
    assert (sent.status, sent.error["code"]) == (415, "unsupported_media_type")


def test_a_multipart_patch_through_the_gateway_is_415(gateway: Gateway, db: Database) -> None:
    token = tokens.create_token(db, scope="admin").token
    created = gateway.call("POST", "/v1/endpoints", {"url": "https://93.184.215.14/h"}, token=token)
    reply = gateway.call(
        "PATCH",
        f"/v1/endpoints/{created.body['id']}",
        token=token,
        headers={"Content-Type": "multipart/form-data"},
        raw_body=b"--x\r\n\r\n",
    )
    assert (reply.status, reply.error["code"]) == (415, "unsupported_media_type")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/dead-letters/replay", {"endpoint_id": True}, "endpoint_id"),
        ("/v1/dead-letters/replay", {"message_ids": [True]}, "message_ids[0]"),
        ("/v1/events", {"event_type": "t", "payload": {}, "endpoint_ids": [True]}, None),
        ("/v1/endpoints", {"url": "https://93.184.215.14/x", "retry_schedule": [True]}, None),
    ],
)
def test_true_is_not_a_number(api: Api, db: Database, path: str, body: dict, field: str) -> None:
    """A whole number in a body must be a JSON number: true is refused, never read as 1."""
    reply = api.post(path, body)
    assert reply.status == 422, reply.raw
    if field is not None:
        assert reply.error["field"] == field
    assert count(db, "endpoints") == 0 and count(db, "tokens") == 0
