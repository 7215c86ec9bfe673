"""Client certificates about to expire are reported to the producer's systems: one of the health
monitor's jobs.

Beside the operators' alert a week ahead, each run records the operational event
endpoint.certificate.expiring for every endpoint's TLS client certificate that expires within a
notice period, once per certificate and period (the event id names both, so the runs every five
minutes that find it again add nothing).
"""

from __future__ import annotations

from datetime import datetime

from tidings.dal import health as dal
from tidings.dal.connection import Database

# The notice periods, in days. Each is shorter than the idempotency window (7 days), which is
# what keeps a certificate found again and again to one event per period.
NOTICE_DAYS = (7, 1)


def report_expiring_certificates(db: Database, now: datetime) -> int:
    """Record the events for certificates expiring within a notice period of ``now``; how many
    certificates were found."""
    return db.run(
        lambda cur: dal.report_expiring_certificates(cur, now=now, notice_days=NOTICE_DAYS),
        transaction=True,
    )
