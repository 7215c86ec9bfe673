-- An endpoint leaves the slow lane once it answers quickly there, not only when its hold ends.
--
-- One answer of a second or more (a receiver's pause, a lost SYN retried after a second) put an
-- endpoint in the slow lane for the whole of TIDINGS_SLOW_LANE_HOLD_S (ten minutes), where its
-- messages travel one to an invocation with a few in flight: a receiver taking thousands of
-- deliveries a minute got a few hundred, for ten minutes, after a single slow answer. Now the
-- sender counts the quick answers (under half the threshold) an endpoint gives in the slow lane,
-- and the one that makes TIDINGS_SLOW_LANE_RELEASE_ANSWERS in a row ends its mark; a slow answer
-- starts the count again (mark_slow_v1).
ALTER TABLE tidings.endpoint_health
    ADD COLUMN quick_answers integer NOT NULL DEFAULT 0 CHECK (quick_answers >= 0);

COMMENT ON COLUMN tidings.endpoint_health.quick_answers IS
    'Quick answers in a row since the endpoint was last marked slow (tidings.mark_quick_v1)';

-- mark_slow_v1 (0094) replaced in place: a slow answer also starts the count of quick ones
-- again, so a mark still fresh is rewritten when quick answers were counted against it.
CREATE OR REPLACE FUNCTION tidings.mark_slow_v1(p_endpoint_ids bigint[], p_hold_s double precision)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    WITH due AS (
        SELECT h.endpoint_id
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id = ANY (p_endpoint_ids)
          AND (h.slow_until IS NULL
               OR h.slow_until < now() + p_hold_s / 2 * interval '1 second'
               OR h.quick_answers > 0)
        ORDER BY h.endpoint_id
        FOR NO KEY UPDATE
    ),
    marked AS (
        UPDATE tidings.endpoint_health h
        SET slow_until = now() + p_hold_s * interval '1 second',
            quick_answers = 0
        FROM due
        WHERE h.endpoint_id = due.endpoint_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM marked
$$;

-- Counts a quick answer of each endpoint still marked slow; the answer that makes
-- p_release_after in a row ends the mark (and the count). Endpoints not marked (an untried
-- endpoint's rows travel the slow lane too) are left alone. Returns how many marks it ended.
CREATE FUNCTION tidings.mark_quick_v1(p_endpoint_ids bigint[], p_release_after integer)
RETURNS integer
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    WITH due AS (
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
                              ELSE h.slow_until END
        FROM due
        WHERE h.endpoint_id = due.endpoint_id
        RETURNING h.slow_until IS NULL AS released
    )
    SELECT count(*) FILTER (WHERE released)::integer FROM counted
$$;

GRANT EXECUTE ON FUNCTION tidings.mark_quick_v1(bigint[], integer) TO tidings_sender;
