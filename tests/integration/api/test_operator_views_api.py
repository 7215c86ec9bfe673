"""The operators' views over the API: the queue's status and the dead-letter report, every
application's at ``/v1/admin/…`` (admin tokens only) and one application's at
``/v1/apps/{app}/…`` (its own tokens see it; another application's is as unknown as one that does
not exist), through the token authorizer and the ingest function as API Gateway runs them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api.conftest import Gateway
from tests.support.seed import make_application, make_endpoint, seed_messages
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.logic import applications, status, tokens

VIEWS = ("status", "dead-letters")


@dataclass
class Tenants:
    acme_endpoint: int
    globex_endpoint: int
    admin: str
    acme: str
    acme_reader: str
    globex: str
    producer: str


@pytest.fixture
def tenants(db: Database) -> Tenants:
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        globex = make_application(cur, "globex")
        acme_endpoint = make_endpoint(cur, "https://93.184.215.14/acme-hook", app_id=acme)
        globex_endpoint = make_endpoint(
            cur, "https://93.184.215.14/globex-only-hook", app_id=globex
        )
        seed_messages(cur, acme_endpoint, 3)
        seed_messages(cur, globex_endpoint, 2)
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 3, last_error = 'http_500', last_status_code = 500"
        )
    return Tenants(
        acme_endpoint=acme_endpoint,
        globex_endpoint=globex_endpoint,
        admin=tokens.create_token(db, scope="admin").token,
        acme=tokens.create_token(db, scope="app", application="acme").token,
        acme_reader=tokens.create_token(db, scope="app_read", application="acme").token,
        globex=tokens.create_token(db, scope="app", application="globex").token,
        producer=tokens.create_token(db, scope="producer").token,
    )


def test_an_admin_sees_every_application(gateway: Gateway, tenants: Tenants) -> None:
    shown = gateway.call("GET", "/v1/admin/status", token=tenants.admin)
    assert shown.status == 200, shown.raw
    assert shown.body["application"] is None
    assert shown.body["summary"]["dead_letters"] == 5
    assert {a["app_uid"]: a["dead_letters"] for a in shown.body["applications"]} == {
        "acme": 3,
        "globex": 2,
    }
    assert [e["endpoint_id"] for e in shown.body["endpoints"]] == [
        tenants.acme_endpoint,
        tenants.globex_endpoint,
    ]
    report = gateway.call("GET", "/v1/admin/dead-letters", token=tenants.admin)
    assert report.status == 200, report.raw
    assert report.body["total"] == 5
    assert {e["application"] for e in report.body["endpoints"]} == {"acme", "globex"}
    # An admin may read one application's views too.
    for view in VIEWS:
        one = gateway.call("GET", f"/v1/apps/globex/{view}", token=tenants.admin)
        assert one.status == 200 and "acme-hook" not in one.raw, one.raw


def test_an_application_token_sees_its_own_application_only(
    gateway: Gateway, tenants: Tenants
) -> None:
    for token in (tenants.acme, tenants.acme_reader):
        own = gateway.call("GET", "/v1/apps/acme/status", token=token)
        assert own.status == 200, own.raw
        assert own.body["application"] == "acme"
        assert own.body["summary"]["dead_letters"] == 3
        assert [a["app_uid"] for a in own.body["applications"]] == ["acme"]
        assert [e["endpoint_id"] for e in own.body["endpoints"]] == [tenants.acme_endpoint]
        report = gateway.call("GET", "/v1/apps/acme/dead-letters?window_s=600", token=token)
        assert report.status == 200, report.raw
        assert report.body["total"] == 3
        assert [e["endpoint_id"] for e in report.body["endpoints"]] == [tenants.acme_endpoint]
        for reply in (own, report):
            assert "globex" not in reply.raw
        # Every application's views are an admin's.
        for view in VIEWS:
            refused = gateway.call("GET", f"/v1/admin/{view}", token=token)
            assert (refused.status, refused.error["code"]) == (403, "forbidden"), refused.raw


def test_another_application_is_as_unknown_as_one_that_does_not_exist(
    gateway: Gateway, tenants: Tenants, db: Database
) -> None:
    globex_id = applications.find(db, "globex")
    assert globex_id is not None
    for view in VIEWS:
        for app in ("globex", str(globex_id.id), "nobody", "404404"):
            reply = gateway.call("GET", f"/v1/apps/{app}/{view}", token=tenants.acme)
            assert (reply.status, reply.error["code"]) == (404, "application_not_found"), (
                app,
                reply.raw,
            )
            assert (
                "globex-only-hook" not in reply.raw
                and str(tenants.globex_endpoint) not in (reply.error["message"])
            )


def test_a_producer_reads_no_figures(gateway: Gateway, tenants: Tenants) -> None:
    for path in ("/v1/admin/status", "/v1/admin/dead-letters", "/v1/apps/acme/status"):
        reply = gateway.call("GET", path, token=tenants.producer)
        assert (reply.status, reply.error["code"]) == (403, "forbidden"), path


def test_forged_expired_and_revoked_tokens_are_refused(
    gateway: Gateway, tenants: Tenants, db: Database
) -> None:
    revoked = tokens.create_token(db, scope="admin")
    tokens.revoke_token(db, revoked.id)
    expired = tokens.create_token(
        db, scope="app", application="acme", expires_at=datetime.now(UTC) + timedelta(hours=1)
    )
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.tokens SET created_at = now() - interval '1 day',"
            " expires_at = now() - interval '1 minute' WHERE id = %s",
            (expired.id,),
        )
    admin = tenants.admin
    forged = admin[:12] + "".join("B" if c == "A" else "A" for c in admin[12:])
    for token in (forged, revoked.token, expired.token, None):
        for path in ("/v1/admin/status", "/v1/admin/dead-letters", "/v1/apps/acme/status"):
            reply = gateway.call("GET", path, token=token)
            assert (reply.status, reply.error["code"]) == (401, "unauthorized"), (path, token)
            assert "acme-hook" not in reply.raw


@pytest.mark.parametrize("window", ["0", "-5", "7776001", "1.5", "soon"])
def test_a_window_out_of_range_is_refused_with_its_field(
    gateway: Gateway, tenants: Tenants, window: str
) -> None:
    reply = gateway.call("GET", f"/v1/admin/dead-letters?window_s={window}", token=tenants.admin)
    assert reply.status == 422, reply.raw
    assert reply.error["field"] == "window_s"


def test_the_api_answers_what_the_use_case_builds(
    gateway: Gateway, tenants: Tenants, db: Database, settings: Settings
) -> None:
    """The API's answer is the use case's own model, as the command line prints it from the
    database (the times and ages, taken at each call, aside)."""
    answered = gateway.call("GET", "/v1/apps/acme/status", token=tenants.acme).body
    acme = applications.find(db, "acme")
    assert acme is not None
    built = status.status_report(db, settings, acme).model_dump(mode="json")
    for figures in (answered, built):
        figures["summary"].pop("checked_at")
        figures["summary"].pop("oldest_undelivered_age_s")
        for part in figures["applications"]:
            part.pop("oldest_undelivered_age_s")
    assert answered == built
