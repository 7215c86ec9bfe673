"""Resend and recover: what operators reach for after an outage.

- Resend one message, delivered or dead-lettered: a new delivery with a fresh attempt budget;
  its attempt history and its id (so its ``webhook-id``, the receiver's dedupe key) stay.
- Recover an endpoint: every message of it created in a window that is not delivered (dead
  letters, and messages awaiting a retry) gets a new delivery the same way, in bounded batches,
  each its own short transaction. Messages being attempted right now are left to that attempt.
  Repeating a recovery does no harm: what it started is pending (or delivered) by then and is
  not matched again; only what failed again since is.

Either clears the row's lease token along with its attempt count: the record statement writes an
outcome only for a row still under the attempt's lease, so a late outcome of the old delivery
(or a retry message of it still in the queue) can never land on the new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial

from pydantic import BaseModel, Field

from tidings.dal import endpoints as endpoints_dal
from tidings.dal import messages as dal
from tidings.dal.applications import DEFAULT_APP_ID
from tidings.dal.connection import Database
from tidings.logic.errors import Conflict, InvalidInput, NotFound
from tidings.logic.messages import Message
from tidings.logic.validation import check_id

RECOVER_BATCH_SIZE = 1000
MAX_RECOVER_BATCH_SIZE = 10_000


class RecoverResult(BaseModel):
    endpoint_id: int
    since: datetime
    until: datetime = Field(description="The window's end: give it again to repeat the recovery")
    matched: int = Field(description="Messages in the window not delivered nor being attempted")
    requeued: int = Field(description="Of those, how many this call sent again")
    complete: bool = Field(
        description="False when the call ran out of time: call again with the same window"
    )


def resend_message(db: Database, message_id: int, *, app_id: int = DEFAULT_APP_ID) -> Message:
    """A new delivery of a delivered or dead-lettered message of the application; the message as
    it now is. Another application's message is as unknown as a missing one."""
    check_id(message_id, "message_id")
    row = db.run(lambda cur: dal.resend_message(cur, app_id, message_id), transaction=True)
    if row is None:
        raise NotFound("message", message_id)
    resent = row.pop("resent")
    endpoint_open = row.pop("endpoint_open")
    endpoint_deleted = row.pop("endpoint_deleted")
    if resent:
        return Message(**row)
    endpoint = row["endpoint_id"]
    if endpoint_deleted:
        raise Conflict("endpoint_deleted", f"endpoint {endpoint} of the message is deleted")
    if not endpoint_open:
        raise Conflict(
            "endpoint_disabled", f"endpoint {endpoint} is disabled: enable it, then resend"
        )
    raise Conflict(
        "message_not_finished",
        f"message {message_id} is {row['status']}: only a delivered message or a dead letter "
        "can be resent",
    )


def recover_endpoint(
    db: Database,
    endpoint_id: int,
    *,
    since: datetime,
    until: datetime | None = None,
    batch_size: int = RECOVER_BATCH_SIZE,
    time_budget_s: float | None = None,
    progress: Callable[[int, int], None] | None = None,
    app_id: int = DEFAULT_APP_ID,
) -> RecoverResult:
    """Send again every message of the endpoint created in [since, until) (until: now) that is
    a dead letter or awaits a retry, ``batch_size`` at a time. With ``time_budget_s``, stops
    after the batch that passes it (``complete`` is then false). ``progress(done, matched)``
    is called after each batch."""
    check_id(endpoint_id, "endpoint_id")
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and moment.tzinfo is None:
            raise InvalidInput("invalid_value", f"{name} must carry a time zone", name)
    end = until or datetime.now(UTC)
    if since >= end:
        raise InvalidInput("invalid_value", "since must be before until", "since")
    if isinstance(batch_size, bool) or not 1 <= batch_size <= MAX_RECOVER_BATCH_SIZE:
        raise InvalidInput(
            "invalid_value", f"batch_size must be within 1..{MAX_RECOVER_BATCH_SIZE}", "batch_size"
        )
    endpoint = db.run(lambda cur: endpoints_dal.get_endpoint(cur, app_id, endpoint_id))
    if endpoint is None:
        raise NotFound("endpoint", endpoint_id)
    if not endpoint["enabled"]:
        raise Conflict(
            "endpoint_disabled", f"endpoint {endpoint_id} is disabled: enable it, then recover"
        )
    started = time.monotonic()
    ids = db.run(
        lambda cur: dal.recovery_candidates(cur, endpoint_id=endpoint_id, since=since, until=end)
    )
    requeued = 0
    for start in range(0, len(ids), batch_size):
        if time_budget_s is not None and time.monotonic() - started > time_budget_s:
            return RecoverResult(
                endpoint_id=endpoint_id,
                since=since,
                until=end,
                matched=len(ids),
                requeued=requeued,
                complete=False,
            )
        chunk = ids[start : start + batch_size]
        # In a transaction: the chunk with its places in its FIFO lines, or not at all.
        recovered = db.run(
            partial(dal.recover_messages, endpoint_id=endpoint_id, ids=chunk), transaction=True
        )
        requeued += len(recovered)
        if progress is not None:
            progress(start + len(chunk), len(ids))
    return RecoverResult(
        endpoint_id=endpoint_id,
        since=since,
        until=end,
        matched=len(ids),
        requeued=requeued,
        complete=True,
    )
