"""The health monitor's look-up finds an endpoint whose client certificate expires within a week
(and not one whose certificate has longer to live)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.secrets import secrets_keyring
from tests.support.tls import TestCa
from tidings.dal import health
from tidings.dal.connection import Database
from tidings.local.runtime import dev_settings
from tidings.logic.endpoints import create_endpoint


def test_an_expiring_client_certificate_needs_attention(db: Database, database_url: str) -> None:
    ca = TestCa()
    now = datetime.now(UTC)
    settings = dev_settings({}, database_url=database_url)
    ids = {}
    for name, days in (("soon", 3), ("later", 20)):
        issued = ca.issue(name, not_after=now + timedelta(days=days))
        ids[name] = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=f"https://127.0.0.1:9/{name}",
            tls_client_certificate=issued.as_credential(),
            settings=settings,
        ).id
    found = db.run(
        lambda cur: health.endpoints_needing_attention(cur, slow_p95_ms=10_000, min_samples=10)
    )
    expiring = {e.endpoint_id: e.client_certificate_not_after for e in found}
    assert set(expiring) == {ids["soon"]}
    not_after = expiring[ids["soon"]]
    assert not_after is not None and abs(not_after - (now + timedelta(days=3))) < timedelta(
        seconds=2
    )
