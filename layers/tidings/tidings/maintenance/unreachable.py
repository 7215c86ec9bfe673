"""Messages that can no longer be delivered become dead letters: the health monitor's second job.

An endpoint that is deleted or disabled (by hand, on 410 Gone, or for failing too long) receives
nothing; its undelivered messages are dead-lettered with the reason, so that every message still
ends delivered or dead-lettered, and can be replayed once the endpoint is enabled again. Deleting
and disabling do this at once for what they see; this job catches the rest (rows a sender held
back, rows a producer's transaction committed after the endpoint changed, and the endpoints of an
application whose deletion stopped after its first step).
"""

from __future__ import annotations

from typing import Protocol

from tidings.dal import health as dal
from tidings.dal.connection import Database
from tidings.maintenance.batches import in_batches


class UnreachableSettings(Protocol):
    @property
    def unreachable_batch_size(self) -> int: ...
    @property
    def unreachable_max_batches(self) -> int: ...


def dead_letter_unreachable(db: Database, settings: UnreachableSettings) -> int:
    """Dead-letter what deleted and disabled endpoints still have queued; returns how many.
    Endpoints of deleted applications are disabled first, should a deletion have stopped after
    marking its application."""
    db.run(dal.retire_endpoints_of_deleted_applications, transaction=True)
    run = in_batches(
        db,
        lambda cur: dal.dead_letter_unreachable_messages(
            cur, batch_size=settings.unreachable_batch_size
        ),
        size=lambda done: done,
        batch_size=settings.unreachable_batch_size,
        max_batches=settings.unreachable_max_batches,
    )
    return sum(run.results)
