from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.delivery.retry_policy import (
    MAX_RETRY_AFTER_S,
    AttemptError,
    NextAction,
    NextStep,
    Verdict,
    VerdictKind,
    classify,
    decide_next,
    parse_retry_after,
)
from tidings.delivery.retry_schedule import wait_s

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
RETRY = Verdict(VerdictKind.RETRY, "http_503")


# --- parse_retry_after -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("120", 120.0),
        ("0", 0.0),
        ("  45 ", 45.0),
        ("\t7", 7.0),
        ("007", 7.0),
        ("2147483647", 2147483647.0),
        ("Sun, 01 Mar 2026 12:01:30 GMT", 90.0),
        ("Sun, 01 Mar 2026 12:00:10 -0000", 10.0),
        ("Sun, 01 Mar 2026 13:00:10 +0100", 10.0),
        # RFC 9110 asks recipients to accept the obsolete RFC 850 and asctime forms too.
        ("Sunday, 01-Mar-26 12:00:20 GMT", 20.0),
        ("Sun Mar  1 12:00:30 2026", 30.0),
    ],
)
def test_parse_retry_after(header: str, seconds: float | None) -> None:
    assert parse_retry_after(header, NOW) == seconds


def test_missing_retry_after_gives_none() -> None:
    assert parse_retry_after(None, NOW) is None


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_retry_after("5", datetime(2026, 3, 1))


@given(st.text(max_size=80) | st.from_regex(r"\A[ -~]{0,40}\Z"))
def test_parse_retry_after_never_raises_and_stays_within_its_bound(text: str) -> None:
    result = parse_retry_after(text, NOW)
    assert result is None or 0 <= result <= MAX_RETRY_AFTER_S


@given(
    day=st.integers(min_value=-5, max_value=40),
    month=st.sampled_from(["Jan", "Feb", "Mar", "Dec", "Foo"]),
    year=st.integers(min_value=0, max_value=99999),
    hour=st.integers(min_value=0, max_value=10**20),
    minute=st.integers(min_value=0, max_value=99),
    second=st.integers(min_value=0, max_value=99),
    zone=st.sampled_from(["GMT", "UTC", "+0000", "-2359", "+9999", "-99999999999", "EST"]),
)
def test_any_date_shaped_header_gives_a_bounded_wait_or_none(
    *, day: int, month: str, year: int, hour: int, minute: int, second: int, zone: str
) -> None:
    header = f"Sun, {day:02d} {month} {year:04d} {hour:02d}:{minute:02d}:{second:02d} {zone}"
    result = parse_retry_after(header, NOW)
    assert result is None or 0 < result <= MAX_RETRY_AFTER_S


@given(st.integers(min_value=0, max_value=MAX_RETRY_AFTER_S))
def test_delta_seconds_round_trip(seconds: int) -> None:
    assert parse_retry_after(str(seconds), NOW) == seconds


@given(st.integers(min_value=MAX_RETRY_AFTER_S + 1, max_value=10**40))
def test_delta_seconds_past_the_bound_are_absent(seconds: int) -> None:
    assert parse_retry_after(str(seconds), NOW) is None


@given(st.integers(min_value=-(10**6), max_value=10**7))
def test_http_date_round_trip(offset: int) -> None:
    when = NOW + timedelta(seconds=offset)
    header = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
    # A date that is not in the future asks for no wait: the header is as good as absent.
    assert parse_retry_after(header, NOW) == (offset if offset > 0 else None)


# --- classify -----------------------------------------------------------------------------------


def _classify(
    status: int | None = None, error: AttemptError | None = None, retry_after: str | None = None
) -> Verdict:
    return classify(status, error, retry_after, now=NOW)


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_delivered(status: int) -> None:
    assert _classify(status) == Verdict(VerdictKind.DELIVERED, f"http_{status}", None)


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504, 599])
def test_retryable_statuses(status: int) -> None:
    assert _classify(status) == Verdict(VerdictKind.RETRY, f"http_{status}", None)


@pytest.mark.parametrize(
    "status", [100, 101, 199, 300, 301, 302, 304, 308, 400, 401, 403, 404, 405, 409, 413, 422, 451]
)
def test_other_statuses_are_permanent(status: int) -> None:
    assert _classify(status) == Verdict(VerdictKind.PERMANENT, f"http_{status}", None)


def test_nonstandard_statuses_are_permanent() -> None:
    assert _classify(600).kind is VerdictKind.PERMANENT
    assert _classify(999).kind is VerdictKind.PERMANENT


def test_410_is_gone() -> None:
    assert _classify(410) == Verdict(VerdictKind.GONE, "http_410", None)


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_read_on_429_and_503(status: int) -> None:
    assert _classify(status, retry_after="30").retry_after_s == 30.0


@pytest.mark.parametrize("status", [200, 408, 500, 502, 404, 410])
def test_retry_after_is_ignored_elsewhere(status: int) -> None:
    assert _classify(status, retry_after="30").retry_after_s is None


def test_garbage_retry_after_leaves_backoff_in_charge() -> None:
    assert _classify(429, retry_after="later") == Verdict(VerdictKind.RETRY, "http_429", None)


@pytest.mark.parametrize(
    ("error", "kind", "reason"),
    [
        (AttemptError.TIMEOUT, VerdictKind.RETRY, "timeout"),
        (AttemptError.CONNECTION_REFUSED, VerdictKind.RETRY, "connection_refused"),
        (AttemptError.CONNECTION_RESET, VerdictKind.RETRY, "connection_reset"),
        (AttemptError.DNS, VerdictKind.RETRY, "dns"),
        (AttemptError.TLS, VerdictKind.RETRY, "tls"),
        (AttemptError.OTHER, VerdictKind.RETRY, "other"),
        (AttemptError.BLOCKED_ADDRESS, VerdictKind.PERMANENT, "blocked_address"),
        (AttemptError.INVALID_URL, VerdictKind.PERMANENT, "invalid_url"),
        (AttemptError.SIGNING_FAILED, VerdictKind.PERMANENT, "signing_failed"),
        (AttemptError.INVALID_RESPONSE, VerdictKind.RETRY, "invalid_response"),
        (AttemptError.INTERNAL, VerdictKind.RETRY, "internal_error"),
    ],
)
def test_transport_errors(error: AttemptError, kind: VerdictKind, reason: str) -> None:
    assert _classify(error=error) == Verdict(kind, reason, None)


def test_every_transport_error_is_classified() -> None:
    assert {_classify(error=e).reason for e in AttemptError} == {e.value for e in AttemptError}


def test_exactly_one_of_status_and_error() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        _classify()
    with pytest.raises(ValueError, match="exactly one"):
        _classify(500, AttemptError.TIMEOUT)


@pytest.mark.parametrize("status", [0, 99, 1000, -200])
def test_impossible_status_is_refused(status: int) -> None:
    with pytest.raises(ValueError, match="three-digit"):
        _classify(status)


@given(st.integers(min_value=100, max_value=999))
def test_every_status_gets_a_verdict_named_after_it(status: int) -> None:
    verdict = _classify(status, retry_after="10")
    assert verdict.reason == f"http_{status}"
    retryable = status in (408, 425, 429) or 500 <= status <= 599
    assert (verdict.kind is VerdictKind.RETRY) == retryable


def test_verdict_refuses_negative_retry_after() -> None:
    with pytest.raises(ValueError, match="retry_after_s"):
        Verdict(VerdictKind.RETRY, "http_429", -1.0)


# The schedule the formula made by default in earlier releases (base 30 s, max 3600 s, 5 attempts).
SCHEDULE = (30.0, 60.0, 120.0, 240.0)


def _decide(
    verdict: Verdict,
    failed_attempts: int,
    *,
    schedule: tuple[float, ...] = SCHEDULE,
    message_id: int = 1,
    sqs_max_delay_s: float = 900.0,
) -> NextStep:
    return decide_next(
        verdict,
        failed_attempts=failed_attempts,
        schedule=schedule,
        message_id=message_id,
        sqs_max_delay_s=sqs_max_delay_s,
    )


# --- decide_next --------------------------------------------------------------------------------


def test_delivered_finishes() -> None:
    verdict = _classify(200)
    assert _decide(verdict, 1) == NextStep(NextAction.FINISH_DELIVERED, 0.0)


def test_gone_dead_letters_and_disables() -> None:
    verdict = _classify(410)
    step = _decide(verdict, 1)
    assert step == NextStep(NextAction.DEAD_LETTER_AND_DISABLE, 0.0)


def test_permanent_dead_letters_at_once() -> None:
    step = _decide(_classify(404), 1)
    assert step == NextStep(NextAction.DEAD_LETTER, 0.0)


def test_short_delays_go_back_to_the_queue() -> None:
    step = _decide(RETRY, 1, message_id=3)
    assert step.action is NextAction.RETRY_VIA_QUEUE
    assert step.delay_s == pytest.approx(wait_s(SCHEDULE, 1, 3))
    assert 0 <= step.delay_s <= 30


def test_long_delays_wait_in_the_database() -> None:
    schedule = (60.0, 600.0, 1800.0, 7200.0)
    actions = {_decide(RETRY, 3, schedule=schedule, message_id=m).action for m in range(200)}
    assert actions == {NextAction.RETRY_VIA_QUEUE, NextAction.RETRY_VIA_DATABASE}
    # The last retry falls at the end of the schedule, past what SQS can delay.
    assert _decide(RETRY, 4, schedule=schedule).action is NextAction.RETRY_VIA_DATABASE


def test_exhausted_attempts_dead_letter() -> None:
    # Four delays: five attempts.
    assert _decide(RETRY, 5).action is NextAction.DEAD_LETTER
    assert _decide(RETRY, 6).action is NextAction.DEAD_LETTER
    assert _decide(RETRY, 4).action is NextAction.RETRY_VIA_QUEUE
    assert _decide(RETRY, 1, schedule=()).action is NextAction.DEAD_LETTER


def test_a_longer_retry_after_replaces_the_jittered_delay() -> None:
    verdict = _classify(429, retry_after="200")
    step = _decide(verdict, 1)
    assert step == NextStep(NextAction.RETRY_VIA_QUEUE, 200.0)


def test_long_retry_after_goes_to_the_database() -> None:
    schedule = (60.0, 7200.0)
    step = _decide(_classify(503, retry_after="1200"), 1, schedule=schedule)
    assert step == NextStep(NextAction.RETRY_VIA_DATABASE, 1200.0)


def test_retry_after_is_bounded_by_the_schedules_longest_delay() -> None:
    step = _decide(_classify(429, retry_after="86400"), 1, schedule=(60.0, 3600.0))
    assert step == NextStep(NextAction.RETRY_VIA_DATABASE, 3600.0)
    step = _decide(_classify(429, retry_after=str(MAX_RETRY_AFTER_S)), 1, schedule=(60.0, 3600.0))
    assert step == NextStep(NextAction.RETRY_VIA_DATABASE, 3600.0)


def test_a_shorter_retry_after_does_not_shorten_the_wait() -> None:
    for header in ("-3", "0", "1"):
        step = _decide(_classify(503, retry_after=header), 2, message_id=7)
        backoff = _decide(RETRY, 2, message_id=7)
        assert step == NextStep(NextAction.RETRY_VIA_QUEUE, max(backoff.delay_s, float(header)))


def test_retry_after_does_not_extend_the_attempt_budget() -> None:
    step = _decide(_classify(429, retry_after="5"), 5)
    assert step.action is NextAction.DEAD_LETTER


def test_delay_equal_to_sqs_limit_still_uses_the_queue() -> None:
    step = _decide(_classify(429, retry_after="900"), 1, schedule=(60.0, 1800.0))
    assert step == NextStep(NextAction.RETRY_VIA_QUEUE, 900.0)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="failed_attempts"):
        _decide(RETRY, 0)
    with pytest.raises(ValueError, match="sqs_max_delay_s"):
        _decide(RETRY, 1, sqs_max_delay_s=-1)


@given(
    schedule=st.lists(st.floats(min_value=0.01, max_value=86_400), max_size=50).map(tuple),
    failed=st.integers(min_value=1, max_value=52),
    message_id=st.integers(min_value=1, max_value=2**63 - 1),
    retry_after=st.none() | st.floats(min_value=0, max_value=1e9),
    sqs_max=st.floats(min_value=0, max_value=900),
)
def test_retry_steps_respect_every_bound(
    schedule: tuple[float, ...],
    failed: int,
    message_id: int,
    retry_after: float | None,
    sqs_max: float,
) -> None:
    verdict = Verdict(VerdictKind.RETRY, "http_429", retry_after)
    step = decide_next(
        verdict,
        failed_attempts=failed,
        schedule=schedule,
        message_id=message_id,
        sqs_max_delay_s=sqs_max,
    )
    if failed > len(schedule):
        assert step == NextStep(NextAction.DEAD_LETTER, 0.0)
        return
    wait = wait_s(schedule, failed, message_id)
    if retry_after is None:
        assert step.delay_s == wait
    else:
        # Honoured up to the longest delay, never shortening the scheduled wait.
        assert step.delay_s == max(wait, min(retry_after, max(schedule)))
    expected = (
        NextAction.RETRY_VIA_QUEUE if step.delay_s <= sqs_max else NextAction.RETRY_VIA_DATABASE
    )
    assert step.action is expected
