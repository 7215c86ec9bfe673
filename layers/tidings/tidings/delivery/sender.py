"""The sender: deliver one SQS batch of leased rows concurrently and record what happened.

Per batch the database sees ``begin_attempts`` (leases renewed, circuit gate) once, before any
request leaves; then the rows go out a wave at a time (``sender_concurrency`` requests at once),
and ``record_outcomes`` writes their answers (every outcome, attempt, circuit update and disabled
endpoint, atomically) once ``sender_record_rows`` of them are in, after a wave that found a slow
endpoint, and at the batch's end. Retries with a short delay travel back
through the queue with ``DelaySeconds`` while the row keeps its lease; longer ones wait in the
database for the claimer. The database is the source of truth: an SQS record is acknowledged once
its row's outcome is written, and only what must come back from SQS is reported as failed.

No record can fail its neighbours. A body that is not an envelope is reported failed on its own;
an unexpected error while signing, sending or deciding one record makes that record a failed
attempt with the error class ``internal_error`` (logged with its message id, never its payload);
outcomes the record statement refuses together are written one by one; a retry message that
cannot be built leaves its row to the database; observations are reported record by record.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

import psycopg2
from aws_lambda_powertools.metrics import MetricUnit

from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.delivery import fifo, retry_schedule
from tidings.delivery.attempt import (
    Attempt,
    Decision,
    Job,
    RetrySettings,
    circuit_summaries,
    decide,
    endpoints_to_disable,
    internal_failure,
)
from tidings.delivery.credentials import Credentials
from tidings.delivery.envelope import (
    DeliveryEnvelope,
    MalformedEnvelope,
    envelopes_of,
    send_envelopes,
)
from tidings.delivery.http_transport import HttpTransport
from tidings.delivery.lanes import Timing, quick_endpoints, slow_endpoints
from tidings.delivery.retry_policy import NextAction
from tidings.delivery.sending import NOT_SENT, PartSender, log_internal_error
from tidings.observability import logger, metrics
from tidings.queue import MAX_DELAY_S, DeliveryQueue, OutgoingMessage
from tidings.secrets.envelope import DataKey
from tidings.secrets.keyring import Keyring
from tidings.secrets.master_keys import KeyUnavailable


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """One record of an SQS event: its SQS message id and body."""

    record_id: str
    body: str


@dataclass(frozen=True, slots=True)
class BatchReport:
    """What a batch came to; ``failed_record_ids`` must come back from SQS."""

    failed_record_ids: frozenset[str] = frozenset()
    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    # Rows whose lease was lost, or that their endpoint's circuit held back: nothing was sent.
    skipped: int = 0


# The database could not be reached or gave up on the statement (timeout, failover): worth
# trying the batch again later. Any other database error is a defect and propagates.
_UNAVAILABLE = (psycopg2.OperationalError, psycopg2.InterfaceError)
# The record statement refused a value of the batch (out of range, not storable, a broken
# rule): one record's data, so the outcomes are written one by one to isolate it.
_REFUSED_VALUES = (psycopg2.DataError, psycopg2.IntegrityError, ValueError)

# After the last request the invocation still needs time to record the outcomes (a statement
# bounded by the statement timeout) and to answer: requests get what remains beyond that.
ANSWER_MARGIN_S = 5.0
# With less time than this left for requests, none is sent: the rows go back to the database.
MIN_SEND_BUDGET_S = 1.0
# When the data keys that open the batch's signing secrets cannot be had (KMS unreachable or
# refusing), nothing is sent and the rows are due again after this long, without an attempt.
KEYS_UNAVAILABLE_DELAY_S = 30.0


class SenderSettings(RetrySettings, retry_schedule.ScheduleSettings, Protocol):
    """What the sender reads of the settings (beyond deciding each attempt's fate)."""

    @property
    def http_timeout_s(self) -> float: ...
    @property
    def circuit_cooldown_s(self) -> float: ...
    @property
    def circuit_max_cooldown_s(self) -> float: ...
    @property
    def statement_timeout_ms(self) -> int: ...
    @property
    def sender_concurrency(self) -> int: ...
    @property
    def sender_record_rows(self) -> int: ...
    @property
    def slow_lane_threshold_ms(self) -> int: ...
    @property
    def slow_lane_hold_s(self) -> float: ...
    @property
    def slow_lane_release_answers(self) -> int: ...
    @property
    def lease_queue_allowance_s(self) -> float: ...
    @property
    def deliveries_per_message(self) -> int: ...


def record_reserve_s(settings: SenderSettings) -> float:
    """What an invocation keeps after its last request: the record statement and the answer."""
    return settings.statement_timeout_ms / 1000 + ANSWER_MARGIN_S


class Sender:
    """Delivers batches; build one per invocation (the transport and threads are shared)."""

    def __init__(
        self,
        db: Database,
        queue: DeliveryQueue,
        settings: SenderSettings,
        transport: HttpTransport,
        *,
        keyring: Keyring,
    ) -> None:
        self.db = db
        # Retries through the queue go back to the fast lane's: a slow endpoint's pass the claim.
        self.queue = queue
        self.settings = settings
        self.transport = transport
        self._default_schedule = retry_schedule.deployment_default(settings)
        self.keyring = keyring
        self._part_sender = PartSender(
            transport, _shared_credentials(transport), settings.http_timeout_s
        )

    def process(
        self,
        records: Sequence[QueueRecord],
        remaining_ms: Callable[[], int] | None = None,
    ) -> BatchReport:
        """Deliver the batch. ``remaining_ms`` (the invocation's time left) caps every request's
        timeout, so that the outcomes are recorded before the invocation is cut off."""
        envelopes, poison = _parse(records)
        if not envelopes:
            return BatchReport(failed_record_ids=frozenset(poison))
        requests = [
            delivery.AttemptRequest(env.lease, env.attempt, want_payload=env.payload is None)
            for _, env in envelopes
        ]
        try:
            started = self.db.run(
                lambda cur: delivery.begin_attempts(cur, requests, lease_s=self.settings.lease_s)
            )
        except _UNAVAILABLE:
            logger.exception(
                "database unavailable before sending; the batch returns to the queue",
                extra={"message_ids": sorted(env.message_id for _, env in envelopes)},
            )
            return BatchReport(
                failed_record_ids=frozenset(poison | {record_id for record_id, _ in envelopes})
            )
        jobs, unsendable = _jobs(envelopes, started)
        skipped = len(envelopes) - len(jobs) - len(unsendable)
        if not jobs and not unsendable:
            return BatchReport(failed_record_ids=frozenset(poison), skipped=skipped)
        keys = self._data_keys(jobs)
        if keys is None:
            unsent = self._give_back([*jobs, *unsendable], delay_s=KEYS_UNAVAILABLE_DELAY_S)
            return BatchReport(
                failed_record_ids=frozenset(poison | unsent),
                skipped=skipped + len(jobs) + len(unsendable),
            )
        before = BatchReport(failed_record_ids=frozenset(poison), skipped=skipped)
        return self._deliver(jobs, unsendable, keys, remaining_ms, report=before)

    def _deliver(
        self,
        jobs: Sequence[Job],
        unsendable: Sequence[Job],
        keys: Mapping[int, DataKey],
        remaining_ms: Callable[[], int] | None,
        *,
        report: BatchReport,
    ) -> BatchReport:
        """Send the begun rows a wave at a time and record their answers; ``report``: what the
        batch came to before its first request."""
        # The requests go out in waves of sender_concurrency; the answers are recorded together
        # once sender_record_rows of them are in, after a wave that found a slow endpoint, and at
        # the batch's end. The record's cost is mostly per statement, not per row; the answers
        # a record waits for are what a sender that dies (or loses its database) mid-batch
        # delivers a second time, and a slow wave is written at once, so that a slow receiver
        # keeps no quick answer unwritten.
        waves = _parts(jobs, self.settings.sender_concurrency)
        unrecorded: list[Decision] = []
        for index, wave in enumerate(waves):
            wave_unsendable = unsendable if index == 0 else []
            budget_s = self._send_budget_s(remaining_ms)
            if budget_s is not None and budget_s < MIN_SEND_BUDGET_S:
                # Too little of the invocation left to send: what was sent is recorded first,
                # and the rest, never sent, returns to the database.
                settled, _ = self._settle(unrecorded)
                unsent = [*(job for later in waves[index:] for job in later), *wave_unsendable]
                _log_out_of_time(unsent, budget_s)
                return self._returned(_combined(report, settled), unsent)
            decisions, slow = self._send_and_decide(wave, wave_unsendable, keys, budget_s)
            unrecorded.extend(decisions)
            last = index == len(waves) - 1
            if not (last or slow or len(unrecorded) >= self.settings.sender_record_rows):
                continue
            settled, go_on = self._settle(unrecorded)
            report = _combined(report, settled)
            unrecorded = []
            if not go_on:
                return self._returned(
                    report, [job for later in waves[index + 1 :] for job in later]
                )
        return report

    def _returned(self, report: BatchReport, jobs: Sequence[Job]) -> BatchReport:
        """``report`` with ``jobs``, never sent, returned to the database (due at once), or to
        the queue when the database cannot take them."""
        if not jobs:
            return report
        unsent = self._give_back(jobs, delay_s=0)
        return _combined(
            report, BatchReport(failed_record_ids=frozenset(unsent), skipped=len(jobs))
        )

    def _send_and_decide(
        self,
        jobs: Sequence[Job],
        unsendable: Sequence[Job],
        keys: Mapping[int, DataKey],
        budget_s: float | None,
    ) -> tuple[list[Decision], set[int]]:
        """Send one wave and decide each attempt's fate; the decisions and the endpoints the
        wave found slow."""
        sent = self._part_sender.send(jobs, budget_s, keys)
        attempts = sent + [Attempt(job, datetime.now(UTC), NOT_SENT) for job in unsendable]
        # Before deciding and recording: a recorded answer takes an untried endpoint out of its
        # cap, and must not leave it out of the slow lane when that answer was slow; and an
        # endpoint found slow has its retries pass the claim.
        slow = self._mark_slow(attempts)
        now = datetime.now(UTC)
        return [self._decide(attempt, now, slow=slow) for attempt in attempts], slow

    def _settle(self, decisions: Sequence[Decision]) -> tuple[BatchReport, bool]:
        """Record the decisions (one statement when it can), then queue their retries and move
        their FIFO lines on; what they came to, and whether the batch may go on (not when the
        database was unreachable: their records then come back from the queue)."""
        if not decisions:
            return BatchReport(), True
        try:
            recorded_decisions, recorded = self._record(decisions)
        except _UNAVAILABLE:
            logger.exception(
                "database unavailable after sending; the attempted records return to the queue",
                extra={"message_ids": sorted(d.attempt.job.row.message_id for d in decisions)},
            )
            return BatchReport(
                failed_record_ids=frozenset(d.attempt.job.record_id for d in decisions)
            ), False
        written = [
            d for d in recorded_decisions if d.outcome.lease.message_id in recorded.written_ids
        ]
        self._requeue([d for d in written if d.step.action is NextAction.RETRY_VIA_QUEUE])
        self._move_lines_on(written)
        _report_observations(recorded_decisions, recorded)
        self._count_quick_answers(recorded_decisions)
        return BatchReport(
            delivered=sum(d.outcome.status is delivery.MessageStatus.DELIVERED for d in written),
            retried=sum(d.outcome.status is delivery.MessageStatus.FAILED for d in written),
            dead_lettered=sum(
                d.outcome.status is delivery.MessageStatus.DEAD_LETTER for d in written
            ),
        ), True

    def _mark_slow(self, attempts: Sequence[Attempt]) -> set[int]:
        """Put the endpoints of slow (or timed-out) attempts in the slow lane; returns them.
        Nothing is written for quick attempts; a failure here costs the lane, never the
        outcomes."""
        slow = slow_endpoints((_timing(a) for a in attempts), self.settings.slow_lane_threshold_ms)
        if not slow:
            return set()
        try:
            self.db.run(
                lambda cur: delivery.mark_slow(cur, slow, hold_s=self.settings.slow_lane_hold_s)
            )
        except psycopg2.Error:
            logger.exception("could not mark slow endpoints", extra={"endpoint_ids": slow})
        return set(slow)

    def _count_quick_answers(self, decisions: Sequence[Decision]) -> None:
        """Count the quick answers of the rows that travelled the slow lane (enough in a row
        take their endpoint out of it). After the record: no decision depends on it, and a
        failure here costs the lane, never the outcomes."""
        in_slow_lane = [d.attempt for d in decisions if d.attempt.job.envelope.slow]
        quick = quick_endpoints(
            (_timing(a) for a in in_slow_lane), self.settings.slow_lane_threshold_ms
        )
        if not quick:
            return
        # The earliest sending of the answers counted (the slow lane's batches hold one row).
        sent_at = min(a.attempted_at for a in in_slow_lane if a.job.row.endpoint_id in quick)
        try:
            released = self.db.run(
                lambda cur: delivery.mark_quick(
                    cur,
                    quick,
                    sent_at=sent_at,
                    release_after=self.settings.slow_lane_release_answers,
                    hold_s=self.settings.slow_lane_hold_s,
                )
            )
        except psycopg2.Error:
            logger.exception(
                "could not count quick answers in the slow lane", extra={"endpoint_ids": quick}
            )
            return
        if released:
            logger.info(
                "endpoints answered quickly in the slow lane and left it",
                extra={"counted_endpoint_ids": quick, "released": released},
            )
            metrics.add_metric(name="EndpointsLeftSlowLane", unit=MetricUnit.Count, value=released)

    def _data_keys(self, jobs: Sequence[Job]) -> Mapping[int, DataKey] | None:
        """The opened data keys of the jobs' signing secrets (from the keyring's cache, else one
        read and one KMS call per data key); None when they cannot be had now."""
        wanted = {sealed.data_key_id for job in jobs for sealed in job.row.secrets}
        wanted.update(c.data_key_id for job in jobs for c in job.row.credentials)
        try:
            return self.db.run(lambda cur: self.keyring.data_keys(cur, wanted))
        except (KeyUnavailable, *_UNAVAILABLE) as exc:
            logger.error(
                "the data keys of the batch's signing secrets are unavailable; nothing is sent",
                extra={"reason": str(exc) if isinstance(exc, KeyUnavailable) else "database"},
            )
            return None

    def _send_budget_s(self, remaining_ms: Callable[[], int] | None) -> float | None:
        """Seconds the requests may take, or None when the invocation has no deadline."""
        if remaining_ms is None:
            return None
        return remaining_ms() / 1000 - record_reserve_s(self.settings)

    def _give_back(self, jobs: Sequence[Job], *, delay_s: float) -> set[str]:
        """Return unsent rows to the database, due after ``delay_s``; the record ids that must
        instead come back from the queue (their rows could not be released)."""
        leases = [job.row.lease for job in jobs]
        try:
            self.db.run(lambda cur: delivery.release_leases(cur, leases, delay_s=delay_s))
        except _UNAVAILABLE:
            logger.exception("could not release the leases of unsent rows")
            return {job.record_id for job in jobs}
        return set()

    def _decide(self, attempt: Attempt, now: datetime, *, slow: set[int]) -> Decision:
        """``slow``: the endpoints this batch's attempts put in the slow lane."""
        return decide_or_fail(
            attempt,
            self.settings,
            now=now,
            default=self._default_schedule,
            turned_slow=attempt.job.row.endpoint_id in slow,
        )

    def _record(
        self, decisions: Sequence[Decision]
    ) -> tuple[list[Decision], delivery.RecordResult]:
        """Record the batch; the decisions as recorded (an outcome the statement refused is
        replaced by an ``internal_error`` failure) and what the statement wrote."""
        try:
            return list(decisions), self._record_together(decisions)
        except _REFUSED_VALUES as exc:
            if len(decisions) < 2:
                return self._record_alone(decisions[0]) if decisions else ([], _NOTHING_WRITTEN)
            # The error's text is not logged: it may quote a value of the batch.
            logger.warning(
                "the batch's outcomes were refused together; recording them one by one",
                extra={
                    "message_ids": sorted(d.outcome.lease.message_id for d in decisions),
                    "error_type": type(exc).__name__,
                    "sqlstate": getattr(exc, "pgcode", None),
                },
            )
        recorded: list[Decision] = []
        results: list[delivery.RecordResult] = []
        for decision in decisions:
            kept, result = self._record_alone(decision)
            recorded.extend(kept)
            results.append(result)
        return recorded, _merged(results)

    def _record_alone(self, decision: Decision) -> tuple[list[Decision], delivery.RecordResult]:
        try:
            return [decision], self._record_together([decision])
        except _REFUSED_VALUES as exc:
            log_internal_error(
                "an outcome was refused: recorded as a failed attempt (internal_error)",
                decision.attempt.job,
                exc,
            )
        failure = internal_failure(
            decision.attempt,
            self.settings,
            now=datetime.now(UTC),
            schedule=_schedule_of(decision.attempt, self._default_schedule),
        )
        try:
            return [failure], self._record_together([failure])
        except _REFUSED_VALUES as exc:
            # Nothing more to try: the row stays leased, and the claimer takes it back when
            # its lease runs out.
            log_internal_error(
                "an internal_error failure was refused: the row waits for its lease to expire",
                failure.attempt.job,
                exc,
            )
            return [failure], _NOTHING_WRITTEN

    def _record_together(self, decisions: Sequence[Decision]) -> delivery.RecordResult:
        outcomes = [d.outcome for d in decisions]
        health = circuit_summaries(decisions)
        disable = endpoints_to_disable(decisions)
        return self.db.run(
            lambda cur: delivery.record_outcomes(
                cur,
                outcomes,
                health,
                disable,
                base_cooldown_s=self.settings.circuit_cooldown_s,
                max_cooldown_s=self.settings.circuit_max_cooldown_s,
            )
        )

    def _requeue(self, retries: Sequence[Decision]) -> None:
        """Send retry messages to the fast lane's queue (a slow or capped endpoint's retries
        pass the claim instead: ``retries_pass_the_claim``); a row whose message the queue
        refused (or that could not be built) is released at once, to wait out its delay in the
        database."""
        if not retries:
            return
        by_id = {str(d.outcome.lease.message_id): d for d in retries}
        outgoing: list[OutgoingMessage] = []
        unbuilt: list[str] = []
        for key, d in by_id.items():
            try:
                outgoing.append(_retry_message(key, d))
            except Exception as exc:
                log_internal_error(
                    "building a retry message failed; the row waits out its delay in the database",
                    d.attempt.job,
                    exc,
                )
                unbuilt.append(key)
        failed: list[str] = []
        if outgoing:
            try:
                failed = self.queue.send_batch(outgoing)
            except Exception:
                logger.exception("sending retry messages failed; releasing their leases")
                failed = [m.id for m in outgoing]
        for key in [*unbuilt, *failed]:
            self._release(by_id[key])
        if failed:
            logger.warning(
                "queue refused retry messages; the rows wait in the database instead",
                extra={"message_ids": sorted(int(key) for key in failed)},
            )

    def _move_lines_on(self, written: Sequence[Decision]) -> None:
        """Move on the FIFO lines whose heads this batch settled, and queue the new heads the
        database leased (those whose endpoint takes deliveries without the claim; the others
        are due for it). A failure here costs only time: the records' notes stay, and the
        claimer moves those lines on in its next round."""
        lines = fifo.lines_to_move(
            fifo.SettledHead(d.outcome.endpoint_id, d.attempt.job.row.line_key, d.outcome.status)
            for d in written
        )
        if not lines:
            return
        lease_s = self.settings.lease_s + self.settings.lease_queue_allowance_s
        try:
            heads = self.db.run(lambda cur: delivery.advance_lines(cur, lines, lease_s=lease_s))
        except _UNAVAILABLE:
            logger.exception(
                "could not move FIFO lines on; the claimer does",
                extra={"endpoint_ids": sorted({line.endpoint_id for line in lines})},
            )
            return
        if not heads:
            return
        envelopes = [
            DeliveryEnvelope(head.message_id, head.lease_token, head.attempts + 1) for head in heads
        ]
        try:
            unsent = send_envelopes(self.queue, envelopes, self.settings.deliveries_per_message)
        except Exception:
            logger.exception("queueing the next heads of FIFO lines failed; releasing them")
            unsent = [envelope.lease for envelope in envelopes]
        if unsent:
            try:
                self.db.run(lambda cur: delivery.release_leases(cur, unsent))
            except Exception:
                # Their leases run out and the claimer takes them back.
                logger.exception(
                    "could not release the leases of unqueued FIFO heads",
                    extra={"message_ids": sorted(lease.message_id for lease in unsent)},
                )

    def _release(self, decision: Decision) -> None:
        lease, delay_s = decision.outcome.lease, decision.step.delay_s
        try:
            self.db.run(lambda cur: delivery.release_leases(cur, [lease], delay_s=delay_s))
        except Exception:
            # Its outcome is written; the claimer takes the row back when the lease runs out.
            logger.exception(
                "could not release the lease of an unsent retry",
                extra={"message_id": lease.message_id},
            )


def decide_or_fail(
    attempt: Attempt,
    settings: RetrySettings,
    *,
    now: datetime,
    default: retry_schedule.Schedule,
    turned_slow: bool = False,
) -> Decision:
    """The attempt's fate, for the schedule its message follows (its endpoint's own, else the
    ``default``); should deciding it fail, whatever the answer held, a counted ``internal_error``
    failure of this record alone. Never raises for an attempt. ``turned_slow``: the attempt put
    its endpoint in the slow lane."""
    try:
        return decide(
            attempt,
            settings,
            now=now,
            schedule=_schedule_of(attempt, default),
            turned_slow=turned_slow,
        )
    except Exception as exc:
        log_internal_error(
            "deciding an attempt's fate failed: a failed attempt (internal_error)",
            attempt.job,
            exc,
        )
        return internal_failure(attempt, settings, now=now, schedule=_schedule_of(attempt, default))


def _schedule_of(attempt: Attempt, default: retry_schedule.Schedule) -> retry_schedule.Schedule:
    """The schedule an attempt's message follows; the ``default`` should its row's own settings
    not make one (a defect, which the attempt's fate then reports)."""
    row = attempt.job.row
    try:
        return retry_schedule.effective(row.retry_schedule, default, row.max_attempts)
    except Exception:
        return default


_NOTHING_WRITTEN = delivery.RecordResult(frozenset(), (), frozenset())


def _retry_message(key: str, decision: Decision) -> OutgoingMessage:
    return OutgoingMessage(
        id=key,
        body=DeliveryEnvelope(
            decision.outcome.lease.message_id,
            decision.outcome.lease.token,
            decision.outcome.attempt_number + 1,
            decision.attempt.job.payload,
        ).to_body(),
        delay_s=min(MAX_DELAY_S, math.ceil(decision.step.delay_s)),
    )


def _log_out_of_time(jobs: Sequence[Job], budget_s: float) -> None:
    logger.warning(
        "too little of the invocation left to send; the rows return to the database",
        extra={
            "message_ids": sorted(job.row.message_id for job in jobs),
            "send_budget_s": round(budget_s, 3),
        },
    )


def _parts(jobs: Sequence[Job], size: int) -> list[list[Job]]:
    """The jobs in parts of ``size``, in their order; one empty part when there are none."""
    return [list(jobs[start : start + size]) for start in range(0, len(jobs), size)] or [[]]


def _combined(first: BatchReport, second: BatchReport) -> BatchReport:
    return BatchReport(
        failed_record_ids=first.failed_record_ids | second.failed_record_ids,
        delivered=first.delivered + second.delivered,
        retried=first.retried + second.retried,
        dead_lettered=first.dead_lettered + second.dead_lettered,
        skipped=first.skipped + second.skipped,
    )


def _merged(results: Sequence[delivery.RecordResult]) -> delivery.RecordResult:
    return delivery.RecordResult(
        written_ids=frozenset().union(*(r.written_ids for r in results)),
        transitions=tuple(t for r in results for t in r.transitions),
        disabled_endpoint_ids=frozenset().union(*(r.disabled_endpoint_ids for r in results)),
    )


def _parse(
    records: Sequence[QueueRecord],
) -> tuple[list[tuple[str, DeliveryEnvelope]], set[str]]:
    """The envelopes with the ids of the records that carry them (one per row; a record may
    carry several), and the ids of records that are not envelopes."""
    latest: dict[int, tuple[str, DeliveryEnvelope]] = {}
    poison: set[str] = set()
    for record in records:
        try:
            carried = envelopes_of(record.body)
        except MalformedEnvelope as exc:
            # Reported failed, so SQS's maxReceiveCount moves it to the dead-letter queue.
            logger.error(
                "malformed delivery message",
                extra={"sqs_message_id": record.record_id, "reason": str(exc)},
            )
            poison.add(record.record_id)
            continue
        for envelope in carried:
            # Queues deliver at least once: the same row twice in a batch is sent once, for the
            # latest of its attempts (an earlier one is stale and would be refused).
            kept = latest.get(envelope.message_id)
            if kept is None or envelope.attempt > kept[1].attempt:
                latest[envelope.message_id] = (record.record_id, envelope)
    return list(latest.values()), poison


def _jobs(
    envelopes: Sequence[tuple[str, DeliveryEnvelope]], started: Sequence[delivery.StartedAttempt]
) -> tuple[list[Job], list[Job]]:
    """The jobs to send, and those that cannot be sent (their row came without a payload)."""
    rows = {row.message_id: row for row in started if row.batch_of is None}
    members: dict[int, list[delivery.StartedAttempt]] = {}
    for member in started:
        if member.batch_of is not None:
            members.setdefault(member.batch_of, []).append(member)
    jobs: list[Job] = []
    unsendable: list[Job] = []
    for record_id, envelope in envelopes:
        row = rows.get(envelope.message_id)
        if row is None:
            logger.info("lease lost; not sending", extra={"message_id": envelope.message_id})
            continue
        if not row.permitted:
            logger.info(
                "circuit holds the row back",
                extra={"message_id": row.message_id, "endpoint_id": row.endpoint_id},
            )
            continue
        payload = envelope.payload if envelope.payload is not None else row.payload
        if payload is None:
            logger.error(
                "no payload to send; the record counts a failed attempt (internal_error)",
                extra={"message_id": row.message_id, "endpoint_id": row.endpoint_id},
            )
            unsendable.append(Job(record_id, envelope, row, ""))
            continue
        carried = sorted(members.get(row.message_id, ()), key=lambda m: m.line_seq or 0)
        jobs.append(Job(record_id, envelope, row, payload, tuple(carried)))
    return jobs, unsendable


def _timing(attempt: Attempt) -> Timing:
    """What the speed lanes read of an attempt."""
    return Timing(
        attempt.job.row.endpoint_id,
        attempt.result.elapsed_ms,
        attempt.result.error,
        attempt.result.status_code,
    )


def _report_observations(decisions: Sequence[Decision], recorded: delivery.RecordResult) -> None:
    for d in decisions:
        try:
            _observe(d, d.outcome.lease.message_id in recorded.written_ids)
        except Exception as exc:
            # Observations are for people; one that cannot be made loses only itself.
            log_internal_error(
                "reporting an attempt failed; its outcome is recorded", d.attempt.job, exc
            )
    for transition in recorded.transitions:
        logger.warning(
            "circuit state changed",
            extra={
                "endpoint_id": transition.endpoint_id,
                "from_state": transition.from_state,
                "to_state": transition.to_state,
                "cooldown_s": transition.cooldown_s,
            },
        )
    for endpoint_id in sorted(recorded.disabled_endpoint_ids):
        logger.warning(
            "endpoint disabled: it answered 410 Gone", extra={"endpoint_id": endpoint_id}
        )


def _observe(d: Decision, written: bool) -> None:
    # A delivery recorded as delivered is in the attempts table and in the invocation's counts
    # (the sender handler's metrics and its summary line): logged only at DEBUG. A line per
    # success cost the sender more CPU than the request itself, and CloudWatch more than the
    # delivery. Every other attempt (a retry, a dead letter, an outcome not written) is logged.
    if not written or d.outcome.status is not delivery.MessageStatus.DELIVERED:
        _log_attempt(logger.info, d, written)
    elif logger.log_level <= logging.DEBUG:
        _log_attempt(logger.debug, d, written)
    if d.outcome.status_code is not None and d.outcome.response_ms is not None:
        metrics.add_metric(
            name="DeliveryLatency", unit=MetricUnit.Milliseconds, value=d.outcome.response_ms
        )


def _log_attempt(log: Callable[..., None], d: Decision, written: bool) -> None:
    result = d.attempt.result
    log(
        "delivery attempt",
        extra={
            "message_id": d.outcome.lease.message_id,
            "endpoint_id": d.outcome.endpoint_id,
            "attempt": d.outcome.attempt_number,
            "status_code": result.status_code,
            "error": result.error.value if result.error else None,
            "error_class": d.outcome.error_class,
            "error_detail": result.detail,
            "latency_ms": result.elapsed_ms,
            "next": d.step.action.value,
            "delay_s": round(d.step.delay_s, 3),
            "recorded": written,
        },
    )


@functools.cache
def _shared_credentials(transport: HttpTransport) -> Credentials:
    """The process's opened credentials and OAuth2 tokens, for the transport that uses them."""
    return Credentials(transport)
