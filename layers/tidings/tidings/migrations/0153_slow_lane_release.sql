-- An endpoint leaves the slow lane once it answers quickly there, not only when its hold ends.
--
-- One answer of a second or more (a receiver's pause, a lost SYN retried after a second) put an
-- endpoint in the slow lane for the whole of TIDINGS_SLOW_LANE_HOLD_S (ten minutes), where its
-- messages travel one to an invocation with a few in flight: a receiver taking thousands of
-- deliveries a minute got a few hundred, for ten minutes, after a single slow answer. Now the
-- sender counts the quick answers (accepted in under half the threshold) an endpoint gives in
-- the slow lane, and the one that makes TIDINGS_SLOW_LANE_RELEASE_ANSWERS in a row ends its
-- mark; a slow answer starts the count again (mark_slow_v1). An endpoint leaves early once per
-- hold at most: one quick at the slow lane's few requests in flight and slow again at the fast
-- lane's pace (or one that answers quickly only to be let back) would otherwise move between
-- the lanes every few answers, and hold fast batches back each time it came back slow.
ALTER TABLE tidings.endpoint_health
    ADD COLUMN quick_answers integer NOT NULL DEFAULT 0 CHECK (quick_answers >= 0),
    ADD COLUMN left_slow_lane_at timestamptz;

COMMENT ON COLUMN tidings.endpoint_health.quick_answers IS
    'Quick answers in a row in the slow lane since the endpoint was last marked slow '
    '(tidings.mark_quick_v1)';
COMMENT ON COLUMN tidings.endpoint_health.left_slow_lane_at IS
    'When quick answers last took the endpoint out of the slow lane before its mark ended';

-- mark_slow_v1 (0094) replaced in place: a slow answer also starts the count of quick ones
-- again, so a mark still fresh is rewritten when quick answers were counted against it. Whether
-- a row needs writing is read from the row as locked: a locking read that waited for another
-- sender's count returns the row that count wrote, where a condition in the update (or in the
-- locking read's WHERE) would be tested first on the version this statement began with, and a
-- count committed in between would be missed.
CREATE OR REPLACE FUNCTION tidings.mark_slow_v1(p_endpoint_ids bigint[], p_hold_s double precision)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    WITH locked AS (
        SELECT h.endpoint_id,
               h.slow_until IS NULL
               OR h.slow_until < now() + p_hold_s / 2 * interval '1 second'
               OR h.quick_answers > 0 AS due
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id = ANY (p_endpoint_ids)
        ORDER BY h.endpoint_id
        FOR NO KEY UPDATE
    ),
    marked AS (
        UPDATE tidings.endpoint_health h
        SET slow_until = now() + p_hold_s * interval '1 second',
            quick_answers = 0
        FROM locked
        WHERE h.endpoint_id = locked.endpoint_id AND locked.due
        RETURNING 1
    )
    SELECT count(*)::integer FROM marked
$$;

-- Counts a quick answer of each endpoint still marked slow; the answer that makes
-- p_release_after in a row ends the mark (and the count), unless the endpoint left early within
-- the last p_hold_s already: then it stays until its mark ends, and nothing is written.
-- Endpoints not marked (an untried endpoint's rows travel the slow lane too) are left alone.
-- Returns how many marks it ended. (A count repeated after a lost connection brings the
-- release one answer closer; nothing else.)
CREATE FUNCTION tidings.mark_quick_v1(p_endpoint_ids bigint[], p_release_after integer,
                                      p_hold_s double precision)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    WITH locked AS (
        SELECT h.endpoint_id
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id = ANY (p_endpoint_ids) AND h.slow_until > now()
        ORDER BY h.endpoint_id
        FOR NO KEY UPDATE
    ),
    counted AS (
        UPDATE tidings.endpoint_health h
        SET quick_answers = CASE WHEN h.quick_answers + 1 >= p_release_after THEN 0
                                 ELSE h.quick_answers + 1 END,
            slow_until = CASE WHEN h.quick_answers + 1 >= p_release_after THEN NULL
                              ELSE h.slow_until END,
            left_slow_lane_at = CASE WHEN h.quick_answers + 1 >= p_release_after THEN now()
                                     ELSE h.left_slow_lane_at END
        FROM locked
        WHERE h.endpoint_id = locked.endpoint_id
          -- Tested again on the newest version (a release may have come in between).
          AND h.slow_until > now()
          AND (h.left_slow_lane_at IS NULL
               OR h.left_slow_lane_at <= now() - p_hold_s * interval '1 second')
        RETURNING h.slow_until IS NULL AS released
    )
    SELECT count(*) FILTER (WHERE released)::integer FROM counted
$$;

GRANT EXECUTE ON FUNCTION tidings.mark_quick_v1(bigint[], integer, double precision)
    TO tidings_sender;
