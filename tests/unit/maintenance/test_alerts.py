"""Which alerts fire and which resolve, from the conditions and what is already firing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from tidings.config import Settings
from tidings.dal.alerts import StoredAlert
from tidings.dal.health import EndpointAttention
from tidings.maintenance.alerts import (
    AlertKind,
    Condition,
    current_conditions,
    firing_message,
    plan_alerts,
    resolved_message,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = Settings()


def condition(key: str) -> Condition:
    return Condition(key, AlertKind.CIRCUIT_OPEN, key, key)


def stored(key: str) -> StoredAlert:
    return StoredAlert(key, "circuit_open", NOW - timedelta(minutes=30), {})


def endpoint(**changes: object) -> EndpointAttention:
    values: dict[str, object] = {
        "endpoint_id": 7,
        "url": "https://r.example/",
        "enabled": True,
        "disabled_reason": None,
        "state": "closed",
        "opened_at": None,
        "p95_ms": None,
        "sample_count": 0,
        "app_uid": "acme",
    }
    values.update(changes)
    return EndpointAttention(**values)  # type: ignore[arg-type]


keys = st.sets(st.sampled_from(["a", "b", "c", "d", "e"]))


@given(keys, keys)
def test_fire_what_starts_resolve_what_stops(holding: set[str], firing: set[str]) -> None:
    plan = plan_alerts([condition(k) for k in holding], [stored(k) for k in firing])
    assert {c.key for c in plan.fire} == holding - firing
    assert {a.alert_key for a in plan.resolve} == firing - holding
    # Applying the plan leaves exactly the holding conditions firing: the next plan is empty.
    after = (firing - {a.alert_key for a in plan.resolve}) | {c.key for c in plan.fire}
    assert after == holding
    again = plan_alerts([condition(k) for k in holding], [stored(k) for k in after])
    assert (again.fire, again.resolve) == ((), ())


def conditions(**changes: object) -> list[str]:
    arguments: dict[str, object] = {
        "oldest_undelivered_age_s": None,
        "new_dead_letters": None,
        "dead_letters": 0,
        "endpoints": [],
        "settings": SETTINGS,
    }
    arguments.update(changes)
    return [c.key for c in current_conditions(**arguments)]  # type: ignore[arg-type]


def test_thresholds_are_the_settings() -> None:
    assert conditions() == []
    assert conditions(oldest_undelivered_age_s=1800.0) == []
    assert conditions(oldest_undelivered_age_s=1800.5) == ["oldest_undelivered"]
    assert conditions(new_dead_letters=0, dead_letters=9) == []
    assert conditions(new_dead_letters=1, dead_letters=9) == ["dead_letters_growing"]
    tighter = SETTINGS.replace(oldest_undelivered_alert_s=60)
    assert conditions(oldest_undelivered_age_s=61.0, settings=tighter) == ["oldest_undelivered"]


def test_endpoint_conditions() -> None:
    assert conditions(endpoints=[endpoint(state="open", opened_at=NOW)]) == ["circuit_open:7"]
    assert conditions(endpoints=[endpoint(state="half_open", opened_at=NOW)]) == ["circuit_open:7"]
    assert conditions(endpoints=[endpoint(enabled=False, disabled_reason="410 Gone")]) == [
        "endpoint_disabled:7"
    ]
    assert conditions(endpoints=[endpoint(p95_ms=2000.5, sample_count=20)]) == ["slow_endpoint:7"]
    assert conditions(endpoints=[endpoint(p95_ms=2000.0, sample_count=20)]) == []
    assert conditions(endpoints=[endpoint(p95_ms=9000.0, sample_count=19)]) == []


def test_messages_are_short_subjects_and_json_details() -> None:
    (c,) = current_conditions(
        oldest_undelivered_age_s=None,
        new_dead_letters=None,
        dead_letters=0,
        endpoints=[endpoint(enabled=False, disabled_reason="410 Gone")],
        settings=SETTINGS,
    )
    subject, body, attributes = firing_message(c)
    assert subject == "[Tidings] ALERT endpoint 7 (acme) disabled"
    assert "410 Gone" in body
    assert "endpoint 7 of application acme (https://r.example)" in body
    assert json.loads(body.split("\n\n", 1)[1])["details"] == {
        "endpoint_id": 7,
        "application": "acme",
        "reason": "410 Gone",
    }
    assert attributes == {
        "alert_key": "endpoint_disabled:7",
        "kind": "endpoint_disabled",
        "status": "firing",
    }
    subject, body, attributes = resolved_message(stored("circuit_open:7"), NOW)
    assert subject == "[Tidings] RESOLVED circuit_open:7"
    assert "30 minutes ago" in body
    assert attributes["status"] == "resolved"


def test_queue_wide_alerts_name_the_applications() -> None:
    (growing, oldest) = current_conditions(
        oldest_undelivered_age_s=3600.0,
        new_dead_letters=12,
        dead_letters=40,
        endpoints=[],
        settings=SETTINGS,
        new_dead_letters_by_application={"acme": 10, "globex": 2},
        oldest_undelivered_application="globex",
    )
    assert "per application: acme 10, globex 2" in growing.explanation
    assert growing.details["by_application"] == {"acme": 10, "globex": 2}
    assert "A message in application globex has waited 60 minutes" in oldest.explanation
    assert oldest.details["application"] == "globex"


def test_an_alert_names_at_most_ten_applications() -> None:
    many = {f"app-{i:02d}": 20 - i for i in range(12)}
    (growing,) = current_conditions(
        oldest_undelivered_age_s=None,
        new_dead_letters=sum(many.values()),
        dead_letters=200,
        endpoints=[],
        settings=SETTINGS,
        new_dead_letters_by_application=many,
    )
    assert list(growing.details["by_application"]) == [f"app-{i:02d}" for i in range(10)]
    assert growing.explanation.count("app-") == 10
    assert "2 more" in growing.explanation


def test_the_default_application_is_not_named_in_the_text() -> None:
    (c,) = current_conditions(
        oldest_undelivered_age_s=None,
        new_dead_letters=None,
        dead_letters=0,
        endpoints=[endpoint(state="open", app_uid="default")],
        settings=SETTINGS,
    )
    assert c.headline == "circuit open for endpoint 7"
    assert "endpoint 7 (https://r.example)" in c.explanation
    assert c.details["application"] == "default"


def test_a_client_certificate_expiring_within_a_week_fires() -> None:
    soon = NOW + timedelta(days=6)
    assert conditions(endpoints=[endpoint(client_certificate_not_after=soon)]) == [
        "client_certificate_expiring:7"
    ]
    [found] = current_conditions(
        oldest_undelivered_age_s=None,
        new_dead_letters=None,
        dead_letters=0,
        endpoints=[endpoint(client_certificate_not_after=soon)],
        settings=SETTINGS,
    )
    assert soon.isoformat() in found.explanation
    assert found.details["not_after"] == soon.isoformat()
