"""Dead-letter replay: matching dead letters go back to pending, keeping their attempt history."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel

from tidings.dal import messages as dal
from tidings.dal.applications import DEFAULT_APP_ID
from tidings.dal.connection import Database
from tidings.logic.errors import InvalidInput, NotFound
from tidings.logic.validation import check_id

MAX_MESSAGE_IDS = 1000
REPLAY_BATCH_SIZE = 1000


class ReplayResult(BaseModel):
    requeued: int


def replay_dead_letters(
    db: Database,
    *,
    message_ids: Sequence[int] | None = None,
    endpoint_id: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    batch_size: int = REPLAY_BATCH_SIZE,
    app_id: int = DEFAULT_APP_ID,
) -> ReplayResult:
    """Requeue an application's dead letters matching every given filter (at least one is
    required): message ids, an endpoint, a dead-lettered-at range [since, until). Works in
    batches of ``batch_size``, each its own transaction, so a large replay never holds many
    locks. Naming a message or an endpoint the application does not have is refused (NotFound),
    another application's included."""
    if message_ids is None and endpoint_id is None and since is None and until is None:
        raise InvalidInput(
            "missing_filter",
            "name message_ids, endpoint_id or a time range (since/until) to replay",
            None,
        )
    if message_ids is not None:
        if not message_ids:
            raise InvalidInput("invalid_value", "message_ids must not be empty", "message_ids")
        if len(message_ids) > MAX_MESSAGE_IDS:
            raise InvalidInput(
                "invalid_value", f"message_ids holds more than {MAX_MESSAGE_IDS} ids", "message_ids"
            )
        message_ids = [check_id(i, "message_ids") for i in message_ids]
    if endpoint_id is not None:
        check_id(endpoint_id, "endpoint_id")
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and moment.tzinfo is None:
            raise InvalidInput("invalid_value", f"{name} must carry a time zone", name)
    if since is not None and until is not None and since >= until:
        raise InvalidInput("invalid_value", "since must be before until", "since")
    # Rows dead-lettered again while the replay runs are not replayed a second time.
    until = until or datetime.now(UTC)
    if batch_size < 1:
        raise InvalidInput("invalid_value", "batch_size must be positive", "batch_size")
    check_named(db, app_id, message_ids=message_ids, endpoint_id=endpoint_id)

    requeued = 0
    while True:
        batch = db.run(
            lambda cur: dal.replay_dead_letters(
                cur,
                app_id,
                batch_size=batch_size,
                message_ids=message_ids,
                endpoint_id=endpoint_id,
                since=since,
                until=until,
            ),
            # With the batch's places in their FIFO lines, or not at all.
            transaction=True,
        )
        requeued += len(batch)
        if not batch:
            return ReplayResult(requeued=requeued)


def check_named(
    db: Database,
    app_id: int,
    *,
    message_ids: Sequence[int] | None = None,
    endpoint_id: int | None = None,
) -> None:
    """Refuse (NotFound) a replay that names a message or an endpoint the application does not
    have: another application's is as unknown as one that does not exist."""
    if message_ids:
        wanted = list(message_ids)
        outside = db.run(lambda cur: dal.messages_outside_application(cur, app_id, wanted))
        if outside:
            raise NotFound("message", outside[0])
    if endpoint_id is not None:
        named = endpoint_id
        if not db.run(lambda cur: dal.endpoint_of_application(cur, app_id, named)):
            raise NotFound("endpoint", named)
