-- An endpoint leaves the slow lane once it answers well there, not only when its hold ends.
--
-- One answer of a second or more (a receiver's pause, a lost SYN retried after a second) put an
-- endpoint in the slow lane for the whole of TIDINGS_SLOW_LANE_HOLD_S (ten minutes), where its
-- messages travel one to an invocation with a few in flight: a receiver taking thousands of
-- deliveries a minute got a few hundred, for ten minutes, after a single slow answer. Now the
-- sender counts the quick answers (accepted in under half the threshold) an endpoint gives in
-- the slow lane, and once TIDINGS_SLOW_LANE_RELEASE_ANSWERS of them come without a failed
-- attempt of the endpoint in between, its mark ends; a slow answer starts the count again
-- (mark_slow_v1). An endpoint leaves early once per hold at most: one quick at the slow lane's
-- few requests in flight and slow again at the fast lane's pace (or one that answers quickly
-- only to be let back) would otherwise move between the lanes every few answers, and hold fast
-- batches back each time it came back slow.
ALTER TABLE tidings.endpoint_health
    ADD COLUMN quick_answers integer NOT NULL DEFAULT 0 CHECK (quick_answers >= 0),
    ADD COLUMN quick_since timestamptz,
    ADD COLUMN left_slow_lane_at timestamptz;

COMMENT ON COLUMN tidings.endpoint_health.quick_answers IS
    'Quick answers in a row in the slow lane since the endpoint was last marked slow '
    '(tidings.mark_quick_v1)';
COMMENT ON COLUMN tidings.endpoint_health.quick_since IS
    'When the first request the count holds was sent (a failed attempt since starts it again)';
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
            quick_answers = 0,
            quick_since = NULL
        FROM locked
        WHERE h.endpoint_id = locked.endpoint_id AND locked.due
        RETURNING 1
    )
    SELECT count(*)::integer FROM marked
$$;

-- Counts a quick answer of each endpoint still marked slow, to a request sent at p_sent_at.
-- The count holds only requests sent since it began (quick_since, the first one's sending): an
-- answer to a request sent before is not counted, since the failures of that time are not
-- looked at. The answer that brings the count to p_release_after ends the mark (and the count)
-- when no attempt of the endpoint sent since the count began failed (the attempt log holds
-- every attempt that did not deliver: a 5xx, a reset, a timeout); after a failure the count
-- begins again from this answer. An endpoint that left early within the last p_hold_s already
-- stays until its mark ends, and nothing is written. Endpoints not marked (an untried
-- endpoint's rows travel the slow lane too) are left alone. Returns how many marks it ended.
-- Each row is read as locked, so counts made at once by several senders all count. (A count
-- repeated after a lost connection brings the release one answer closer; nothing else.)
CREATE FUNCTION tidings.mark_quick_v1(p_endpoint_ids bigint[], p_sent_at timestamptz,
                                      p_release_after integer, p_hold_s double precision)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_health record;
    v_count integer;
    v_since timestamptz;
    v_released integer := 0;
BEGIN
    FOR v_health IN
        SELECT h.endpoint_id, h.quick_answers, h.quick_since
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id = ANY (p_endpoint_ids)
          AND h.slow_until > now()
          AND (h.left_slow_lane_at IS NULL
               OR h.left_slow_lane_at <= now() - p_hold_s * interval '1 second')
        ORDER BY h.endpoint_id
        FOR NO KEY UPDATE
    LOOP
        IF v_health.quick_answers = 0 OR v_health.quick_since IS NULL THEN
            v_count := 1;
            v_since := p_sent_at;
        ELSIF p_sent_at < v_health.quick_since THEN
            CONTINUE;
        ELSE
            v_count := v_health.quick_answers + 1;
            v_since := v_health.quick_since;
        END IF;
        IF v_count > 1 AND v_count >= p_release_after
           AND EXISTS (SELECT 1 FROM tidings.attempt_log a
                       WHERE a.endpoint_id = v_health.endpoint_id
                         AND a.attempted_at >= v_since) THEN
            -- Not in a row: count again from this answer.
            v_count := 1;
            v_since := p_sent_at;
        END IF;
        IF v_count < p_release_after THEN
            UPDATE tidings.endpoint_health
            SET quick_answers = v_count, quick_since = v_since
            WHERE endpoint_id = v_health.endpoint_id;
        ELSE
            UPDATE tidings.endpoint_health
            SET quick_answers = 0, quick_since = NULL, slow_until = NULL,
                left_slow_lane_at = now()
            WHERE endpoint_id = v_health.endpoint_id;
            v_released := v_released + 1;
        END IF;
    END LOOP;
    RETURN v_released;
END $$;

GRANT EXECUTE ON FUNCTION tidings.mark_quick_v1(bigint[], timestamptz, integer, double precision)
    TO tidings_sender;
