"""Test data made directly in the database, fast and at chosen times."""

from __future__ import annotations

from collections.abc import Sequence

from tests.support.secrets import secrets_keyring
from tidings.dal.connection import Cursor
from tidings.dal.secrets import set_endpoint_secret

TEST_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# The circuit cooldowns a test's record statements pass (the deployment's defaults).
COOLDOWNS = {"base_cooldown_s": 300.0, "max_cooldown_s": 3600.0}


def make_endpoint(
    cur: Cursor,
    url: str = "https://receiver.example/hook",
    *,
    event_types: Sequence[str] = ("*",),
    rate_limit_per_s: float | None = None,
    enabled: bool = True,
    app_id: int = 1,
) -> int:
    cur.execute(
        "INSERT INTO tidings.endpoints (url, rate_limit_per_s, enabled, app_id)"
        " VALUES (%s, %s, %s, %s) RETURNING id",
        (url, rate_limit_per_s, enabled, app_id),
    )
    row = cur.fetchone()
    assert row is not None
    endpoint_id = int(row[0])
    add_secret(cur, endpoint_id, TEST_SECRET)
    for event_type in event_types:
        cur.execute(
            "INSERT INTO tidings.subscriptions (endpoint_id, app_id, event_type)"
            " VALUES (%s, %s, %s)",
            (endpoint_id, app_id, event_type),
        )
    return endpoint_id


def mark_answered(cur: Cursor, endpoint_id: int) -> None:
    """The endpoint has answered once: no longer untried, so the claim puts no cap on it (and its
    retries may travel through the queue)."""
    cur.execute(
        "UPDATE tidings.endpoint_health SET last_success_at = now() WHERE endpoint_id = %s",
        (endpoint_id,),
    )


def make_application(cur: Cursor, uid: str, name: str = "") -> int:
    cur.execute(
        "INSERT INTO tidings.applications (uid, name) VALUES (%s, %s) RETURNING id", (uid, name)
    )
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def add_secret(
    cur: Cursor, endpoint_id: int, secret: str, *, overlap_s: float = 86400, max_secrets: int = 5
) -> None:
    """Make ``secret`` the endpoint's current signing secret, encrypted with the tests' key; the
    one it replaces keeps signing for ``overlap_s``."""
    secret_id, sealed = secrets_keyring().seal(cur, endpoint_id, secret)
    found, _ = set_endpoint_secret(
        cur,
        endpoint_id,
        secret_id=secret_id,
        data_key_id=sealed.data_key_id,
        ciphertext=sealed.ciphertext,
        overlap_s=overlap_s,
        max_secrets=max_secrets,
    )
    assert found, f"endpoint {endpoint_id} does not exist"


def seed_messages(
    cur: Cursor,
    endpoint_id: int,
    count: int,
    *,
    event_type: str = "test.event",
    status: str = "pending",
) -> None:
    """``count`` messages for one endpoint, due now, each with its own small event, in ``status``
    with the columns that status requires."""
    cur.execute(
        """
        WITH ev AS (
            INSERT INTO tidings.events (event_type, event_id, payload)
            SELECT %(event_type)s,
                   'seed-' || %(endpoint_id)s || '-' || g || '-' || gen_random_uuid(),
                   jsonb_build_object('n', g)
            FROM generate_series(1, %(count)s) g
            RETURNING id
        )
        INSERT INTO tidings.messages (event_ref, endpoint_id, event_type, status, attempts,
                                      delivered_at, dead_lettered_at, lease_token)
        SELECT ev.id, %(endpoint_id)s, %(event_type)s, %(status)s::tidings.message_status,
               CASE WHEN %(status)s IN ('pending', 'in_flight') THEN 0 ELSE 1 END,
               CASE WHEN %(status)s = 'delivered' THEN now() END,
               CASE WHEN %(status)s = 'dead_letter' THEN now() END,
               CASE WHEN %(status)s = 'in_flight' THEN gen_random_uuid() END
        FROM ev
        """,
        {"event_type": event_type, "endpoint_id": endpoint_id, "count": count, "status": status},
    )
