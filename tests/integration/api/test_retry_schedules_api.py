"""Retry schedules through the API: an endpoint's own, the deployment's, the deprecated limit."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Api, count
from tidings import wiring
from tidings.config import DEFAULT_RETRY_SCHEDULE, Settings
from tidings.dal.connection import Database

DEFAULT = [int(d) for d in DEFAULT_RETRY_SCHEDULE]


def test_an_endpoint_without_its_own_shows_the_deployments_schedule(api: Api) -> None:
    created = api.create_endpoint()
    assert created["retry_schedule"] == DEFAULT
    assert created["retry_schedule_source"] == "default"
    fetched = api.get(f"/v1/endpoints/{created['id']}").body
    assert (fetched["retry_schedule"], fetched["retry_schedule_source"]) == (DEFAULT, "default")


def test_the_deployments_schedule_follows_its_setting(database_url: str) -> None:
    settings = Settings(database_url=database_url, retry_schedule=(1.0, 2.5))
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        created = Api().create_endpoint()
    assert created["retry_schedule"] == [1, 2.5]


def test_an_endpoints_own_schedule_is_kept_and_shown(api: Api, db: Database) -> None:
    created = api.create_endpoint(retry_schedule=[5, 300, 1800, 86_400])
    assert created["retry_schedule"] == [5, 300, 1800, 86_400]
    assert created["retry_schedule_source"] == "endpoint"
    path = f"/v1/endpoints/{created['id']}"
    assert api.get(path).body["retry_schedule"] == [5, 300, 1800, 86_400]
    listed = api.get("/v1/endpoints").body["items"]
    assert listed[0]["retry_schedule"] == [5, 300, 1800, 86_400]
    with db.cursor() as cur:
        cur.execute("SELECT retry_schedule FROM tidings.endpoints WHERE id = %s", (created["id"],))
        assert cur.fetchone() == ([5, 300, 1800, 86_400],)


def test_update_sets_and_clears_an_endpoints_schedule(api: Api) -> None:
    created = api.create_endpoint(description="kept")
    path = f"/v1/endpoints/{created['id']}"
    changed = api.patch(path, {"retry_schedule": [60, 60]})
    assert changed.status == 200, changed.raw
    assert (changed.body["retry_schedule"], changed.body["retry_schedule_source"]) == (
        [60, 60],
        "endpoint",
    )
    assert changed.body["description"] == "kept"
    # Changing something else leaves the schedule as it is.
    assert api.patch(path, {"description": "other"}).body["retry_schedule"] == [60, 60]
    back = api.patch(path, {"retry_schedule": None})
    assert (back.body["retry_schedule"], back.body["retry_schedule_source"]) == (DEFAULT, "default")


def test_the_deprecated_attempt_limit_still_works_and_excludes_a_schedule(api: Api) -> None:
    limited = api.create_endpoint(max_attempts=3)
    assert limited["max_attempts"] == 3
    assert limited["retry_schedule"] == DEFAULT[:2]
    assert limited["retry_schedule_source"] == "max_attempts"
    path = f"/v1/endpoints/{limited['id']}"
    # A schedule replaces the limit...
    own = api.patch(path, {"retry_schedule": [10]}).body
    assert (own["max_attempts"], own["retry_schedule"]) == (None, [10])
    # ...and a limit replaces the schedule: the deployment's, cut or extended to it.
    longer = api.patch(path, {"max_attempts": 10}).body
    assert longer["retry_schedule"] == DEFAULT + [DEFAULT[-1]] * 2
    assert longer["retry_schedule_source"] == "max_attempts"


@pytest.mark.parametrize(
    ("schedule", "code"),
    [
        ([], "too_short"),
        ([1] * 51, "too_long"),
        ([0], "greater_than_equal"),
        ([5, 86_401], "less_than_equal"),
        ([1.5], "int_from_float"),
        (["soon"], "int_parsing"),
        ("5,300", "list_type"),
    ],
)
def test_a_schedule_out_of_bounds_is_refused_and_nothing_is_written(
    api: Api, db: Database, schedule: Any, code: str
) -> None:
    reply = api.post("/v1/endpoints", {"url": PUBLIC_URL, "retry_schedule": schedule})
    assert reply.status == 422, reply.raw
    assert reply.error["code"] == code
    assert reply.error["field"].startswith("retry_schedule")
    assert count(db, "endpoints") == 0

    created = api.create_endpoint(retry_schedule=[5])
    refused = api.patch(f"/v1/endpoints/{created['id']}", {"retry_schedule": schedule})
    assert refused.status == 422, refused.raw
    assert api.get(f"/v1/endpoints/{created['id']}").body["retry_schedule"] == [5]


def test_a_schedule_and_an_attempt_limit_together_are_refused(api: Api, db: Database) -> None:
    reply = api.post("/v1/endpoints", {"url": PUBLIC_URL, "retry_schedule": [5], "max_attempts": 2})
    assert reply.status == 422, reply.raw
    assert (reply.error["code"], reply.error["field"]) == ("conflicting_fields", "max_attempts")
    assert count(db, "endpoints") == 0
    created = api.create_endpoint()
    both = api.patch(f"/v1/endpoints/{created['id']}", {"retry_schedule": [5], "max_attempts": 2})
    assert both.status == 422
    assert both.error["code"] == "conflicting_fields"
