"""Percentiles from histograms against an exact computation over the same attempts."""

from __future__ import annotations

import math
import random
import threading
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from tests.integration.maintenance.scheduled_support import (
    LambdaContext,
    insert_attempts,
    load_handler,
)
from tests.support.seed import make_endpoint
from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.maintenance.percentiles import (
    MAX_RELATIVE_ERROR,
    PercentileRefresh,
    bucket_of,
    floor_minute,
    refresh_percentiles,
)

NOW = datetime(2026, 11, 29, 12, 0, 30, tzinfo=UTC)
SETTINGS = Settings()
QUANTILES = (Fraction(50, 100), Fraction(95, 100), Fraction(99, 100))


def exact(samples: list[int], q: Fraction) -> int:
    """The sample of rank ceil(q * N), as percentile_disc defines the q-th percentile."""
    ordered = sorted(samples)
    return ordered[math.ceil(q * len(ordered)) - 1]


def window_start(now: datetime, window_s: float = SETTINGS.latency_window_s) -> datetime:
    return floor_minute(floor_minute(now) - timedelta(seconds=window_s))


def in_window(
    rows: list[tuple[datetime, int]], now: datetime, window_s: float = SETTINGS.latency_window_s
) -> list[int]:
    start = window_start(now, window_s)
    return [ms for at, ms in rows if start <= at < now]


def refresh(db: Database, now: datetime, settings: Settings = SETTINGS) -> PercentileRefresh:
    return db.run(lambda cur: refresh_percentiles(cur, settings, now), transaction=True)


def random_attempts(
    rng: random.Random, count: int, start: datetime, end: datetime, median_ms: float
) -> list[tuple[datetime, int]]:
    span = (end - start).total_seconds()
    return [
        (
            start + timedelta(seconds=rng.uniform(0, span)),
            max(0, round(rng.lognormvariate(math.log(median_ms), 1.0))),
        )
        for _ in range(count)
    ]


def add(db: Database, endpoint_id: int, rows: list[tuple[datetime, int]]) -> None:
    with db.cursor() as cur:
        insert_attempts(cur, endpoint_id, [at for at, _ in rows], [ms for _, ms in rows])


def assert_close(refreshed: PercentileRefresh, endpoint_id: int, samples: list[int]) -> None:
    figures = next(e for e in refreshed.endpoints if e.endpoint_id == endpoint_id)
    assert figures.sample_count == len(samples)
    for q, got in zip(QUANTILES, (figures.p50_ms, figures.p95_ms, figures.p99_ms), strict=True):
        want = exact(samples, q)
        assert got is not None
        if want == 0:
            assert got == 0
        else:
            assert abs(got - want) / want <= MAX_RELATIVE_ERROR + 1e-12, (q, got, want)


def test_sql_buckets_agree_with_the_python_rule(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(
            "SELECT ms, CASE WHEN ms <= 0 THEN -1"
            " ELSE floor(ln(ms::double precision) / ln(%s)) END::smallint"
            " FROM generate_series(0, 200000) ms",
            (1.02,),
        )
        mismatched = [(ms, b) for ms, b in cur.fetchall() if bucket_of(ms) != b]
    assert mismatched == []


def test_percentiles_match_the_exact_ones_within_the_stated_error(db: Database) -> None:
    rng = random.Random(7)
    with db.cursor() as cur:
        fast, slow, idle = (make_endpoint(cur, f"https://r{i}.example/") for i in range(3))
    fast_rows = random_attempts(rng, 3000, NOW - timedelta(hours=30), NOW, 120)
    slow_rows = random_attempts(rng, 800, NOW - timedelta(hours=23), NOW, 2500)
    fast_rows += [(NOW - timedelta(hours=2), 0)] * 40  # zero-millisecond answers count too
    add(db, fast, fast_rows)
    add(db, slow, slow_rows)
    # An attempt stamped after the refresh's moment is not counted yet.
    add(db, slow, [(NOW + timedelta(seconds=5), 99_999)])

    refreshed = refresh(db, NOW)

    assert refreshed.rebuilt
    assert_close(refreshed, fast, in_window(fast_rows, NOW))
    assert_close(refreshed, slow, in_window(slow_rows, NOW))
    idle_figures = next(e for e in refreshed.endpoints if e.endpoint_id == idle)
    assert (idle_figures.p95_ms, idle_figures.sample_count) == (None, 0)
    with db.cursor() as cur:
        cur.execute(
            "SELECT sample_count, p95_ms, percentiles_at FROM tidings.endpoint_health"
            " WHERE endpoint_id = %s",
            (slow,),
        )
        stored = cur.fetchone()
    assert stored is not None
    assert stored[0] == len(in_window(slow_rows, NOW))
    assert stored[2] == NOW


def test_a_build_too_big_for_one_run_goes_on_in_the_next_and_ends_exact(db: Database) -> None:
    """A build with no time budget rolls one slice per run; the figures appear only once the
    histograms reach the present, and then match the exact percentiles."""
    rng = random.Random(11)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
    rows = random_attempts(rng, 2000, NOW - timedelta(hours=26), NOW + timedelta(hours=1), 90)
    add(db, endpoint_id, rows)
    settings = SETTINGS.replace(percentiles_build_slice_s=6 * 3600, percentiles_build_budget_s=1e-9)
    runs, now = [], NOW
    while len(runs) < 10:
        refreshed = refresh(db, now, settings)
        runs.append(refreshed)
        if not refreshed.building:
            break
        assert refreshed.endpoints == ()
        now += timedelta(minutes=5)
    # A day's window in slices of six hours: four to reach the present, the last one short.
    assert len(runs) == 5
    assert [r.building for r in runs] == [True] * 4 + [False]
    assert runs[-1].rebuilt
    assert_close(runs[-1], endpoint_id, in_window(rows, now))
    # And the next run is an ordinary one.
    later = now + timedelta(minutes=5)
    following = refresh(db, later, settings)
    assert not following.building and not following.rebuilt
    assert_close(following, endpoint_id, in_window(rows, later))


def test_incremental_runs_keep_matching_as_the_window_moves(db: Database) -> None:
    """Runs every 5 minutes for 40 minutes: minutes enter and leave the window, attempts
    arrive late (stamped before the previous run), and every run matches a fresh exact count."""
    rng = random.Random(11)
    window_s = 3600.0
    settings = SETTINGS.replace(latency_window_s=window_s, percentiles_rollup_margin_s=600)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    rows = random_attempts(rng, 2000, NOW - timedelta(hours=2), NOW, 300)
    add(db, endpoint, rows)
    first = refresh(db, NOW, settings)
    assert first.rebuilt
    assert_close(first, endpoint, in_window(rows, NOW, window_s))

    now = NOW
    for step in range(8):
        later = now + timedelta(minutes=5)
        fresh = random_attempts(rng, 150, now, later, 300 + 200 * step)
        # Committed now, but made up to 9 minutes before the previous run (within the margin).
        late = random_attempts(rng, 30, now - timedelta(minutes=9), now, 5000)
        add(db, endpoint, fresh + late)
        rows += fresh + late
        now = later
        refreshed = refresh(db, now, settings)
        assert not refreshed.rebuilt
        assert_close(refreshed, endpoint, in_window(rows, now, window_s))

    with db.cursor() as cur:
        cur.execute(
            "SELECT bucket, n FROM tidings.latency_window WHERE endpoint_id = %s ORDER BY bucket",
            (endpoint,),
        )
        histogram = dict(cur.fetchall())
        cur.execute(
            "SELECT percentile_buckets, percentile_below, percentile_at"
            " FROM tidings.endpoint_health WHERE endpoint_id = %s",
            (endpoint,),
        )
        positions = cur.fetchone()
        cur.execute("SELECT min(minute) FROM tidings.latency_buckets")
        oldest_minute = cur.fetchone()
    expected: dict[int, int] = {}
    for ms in in_window(rows, now, window_s):
        expected[bucket_of(ms)] = expected.get(bucket_of(ms), 0) + 1
    assert histogram == expected
    # Each kept position agrees with the histogram: the counts before and in its bucket.
    assert positions is not None
    for bucket, below, at in zip(*positions, strict=True):
        assert below == sum(n for b, n in expected.items() if b < bucket)
        assert at == expected.get(bucket, 0)
    assert oldest_minute is not None and oldest_minute[0] == window_start(now, window_s)


def test_changing_the_window_rebuilds_the_histogram(db: Database) -> None:
    rng = random.Random(3)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    rows = random_attempts(rng, 500, NOW - timedelta(hours=20), NOW, 80)
    add(db, endpoint, rows)
    refresh(db, NOW)
    narrower = SETTINGS.replace(latency_window_s=6 * 3600.0)
    refreshed = refresh(db, NOW + timedelta(minutes=5), narrower)
    assert refreshed.rebuilt
    assert_close(refreshed, endpoint, in_window(rows, NOW + timedelta(minutes=5), 6 * 3600.0))


def test_slow_endpoints_trip_sooner_and_recover(db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    # 20 answers of about 6 s in the last hour: p95 above 5 s.
    add(
        db,
        endpoint,
        [(NOW - timedelta(minutes=50) + timedelta(seconds=i), 6000) for i in range(20)],
    )
    first = refresh(db, NOW)
    (figures,) = first.threshold_changes()
    assert (figures.previous_threshold, figures.failure_threshold) == (10, 5)
    assert [e.endpoint_id for e in first.slow(p95_ms=2000, min_samples=20)] == [endpoint]
    assert first.slow(p95_ms=2000, min_samples=21) == ()

    # Nothing changes while p95 stays high.
    assert refresh(db, NOW + timedelta(minutes=5)).threshold_changes() == ()

    # A day later the slow answers have left the window; fast ones replaced them.
    next_day = NOW + timedelta(hours=25)
    add(db, endpoint, [(next_day - timedelta(minutes=30), 100)] * 30)
    recovered = refresh(db, next_day)
    (figures,) = recovered.threshold_changes()
    assert (figures.previous_threshold, figures.failure_threshold) == (5, 10)
    assert figures.p95_ms == pytest.approx(100, rel=MAX_RELATIVE_ERROR)
    with db.cursor() as cur:
        cur.execute(
            "SELECT failure_threshold FROM tidings.endpoint_health WHERE endpoint_id = %s",
            (endpoint,),
        )
        assert cur.fetchone() == (10,)


def test_handler_reports_slow_endpoints(database_url: str) -> None:
    now = datetime.now(UTC)
    db = Database(database_url)
    with db.cursor() as cur:
        slow = make_endpoint(cur, "https://slow.example/")
        make_endpoint(cur, "https://fast.example/")
    add(db, slow, [(now - timedelta(minutes=10), 2500)] * 25)
    db.close()
    app = load_handler("percentiles")
    with wiring.overridden(
        settings=SETTINGS.replace(database_url=database_url),
        database_factory=lambda: Database(database_url),
    ):
        result = app.handler({}, LambdaContext())
    assert result["endpoints"] == 2
    (reported,) = result["slow_endpoints"]
    assert reported["endpoint_id"] == slow
    assert reported["sample_count"] == 25
    assert reported["p95_ms"] == pytest.approx(2500, rel=MAX_RELATIVE_ERROR)
    assert result["threshold_changes"] == []


def test_overlapping_runs_apply_their_changes_once(database_url: str) -> None:
    rng = random.Random(5)
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoint = make_endpoint(cur)
    rows = random_attempts(rng, 1500, NOW - timedelta(hours=25), NOW, 200)
    add(setup, endpoint, rows)
    refresh(setup, NOW)
    later = NOW + timedelta(minutes=5)
    fresh = random_attempts(rng, 200, NOW - timedelta(minutes=2), later, 900)
    add(setup, endpoint, fresh)
    rows += fresh
    barrier = threading.Barrier(3)
    results: list[PercentileRefresh] = []
    errors: list[BaseException] = []

    def run() -> None:
        db = Database(database_url)
        try:
            barrier.wait()
            results.append(refresh(db, later))
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for result in results:
        assert_close(result, endpoint, in_window(rows, later))
    setup.close()


def test_an_attempt_committed_after_the_margin_is_left_out_cleanly(db: Database) -> None:
    """A straggler older than the re-read margin is never counted, so it is never subtracted
    either: the histogram stays equal to the counted attempts while its minute leaves."""
    settings = SETTINGS.replace(latency_window_s=1800.0, percentiles_rollup_margin_s=300)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    counted = [(NOW - timedelta(minutes=m), 100 + m) for m in range(0, 25)]
    add(db, endpoint, counted)
    refresh(db, NOW, settings)
    straggler = (NOW - timedelta(minutes=20), 77_000)
    add(db, endpoint, [straggler])
    now = NOW
    for _ in range(8):
        now += timedelta(minutes=5)
        refreshed = refresh(db, now, settings)
        figures = next(e for e in refreshed.endpoints if e.endpoint_id == endpoint)
        window = in_window(counted, now, 1800.0)
        assert figures.sample_count == len(window)
        with db.cursor() as cur:
            cur.execute("SELECT min(n), coalesce(sum(n), 0) FROM tidings.latency_window")
            smallest, total = cur.fetchone() or (None, None)
        assert total == len(window)
        assert smallest is None or smallest >= 0


def test_kept_positions_follow_shifts_both_ways_and_new_or_idle_endpoints(db: Database) -> None:
    """A short window with latencies jumping between fast and slow, so that percentiles step far
    up and down between runs; an endpoint goes idle and comes back, another appears midway."""
    rng = random.Random(23)
    window_s = 1800.0
    settings = SETTINGS.replace(latency_window_s=window_s, percentiles_rollup_margin_s=300)
    with db.cursor() as cur:
        jumpy, fading = make_endpoint(cur, "https://jumpy.example/"), make_endpoint(cur)
    rows: dict[int, list[tuple[datetime, int]]] = {
        jumpy: random_attempts(rng, 400, NOW - timedelta(minutes=40), NOW, 50),
        fading: random_attempts(rng, 100, NOW - timedelta(minutes=40), NOW, 400),
    }
    for endpoint, endpoint_rows in rows.items():
        add(db, endpoint, endpoint_rows)
    assert refresh(db, NOW, settings).rebuilt

    now = NOW
    for step, median_ms in enumerate((4000, 30, 9000, 60, 15, 2500, 700, 20, 5000, 90)):
        later = now + timedelta(minutes=10)
        if step == 3:
            with db.cursor() as cur:
                rows[make_endpoint(cur, "https://newcomer.example/")] = []
        for endpoint in rows:
            # The fading endpoint sends nothing for a while (its samples all leave), then resumes.
            if endpoint == fading and 1 <= step <= 5:
                continue
            fresh = random_attempts(rng, 150, now, later, median_ms * (1 + endpoint % 3))
            add(db, endpoint, fresh)
            rows[endpoint] += fresh
        now = later
        refreshed = refresh(db, now, settings)
        assert not refreshed.rebuilt
        for endpoint, endpoint_rows in rows.items():
            samples = in_window(endpoint_rows, now, window_s)
            if samples:
                assert_close(refreshed, endpoint, samples)
            else:
                figures = next(e for e in refreshed.endpoints if e.endpoint_id == endpoint)
                assert (figures.sample_count, figures.p50_ms, figures.p99_ms) == (0, None, None)
