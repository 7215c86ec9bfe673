-- record_outcomes_v1 as in 0120_operational_events.sql, disabling an endpoint that answered 410
-- only for an attempt this call logs: the same outcomes recorded again (after a connection lost
-- once the first call had committed) write nothing, so they neither disable again an endpoint a
-- person re-enabled in between nor report a second endpoint.disabled. Replaced in place (same
-- arguments, so grants stay), its attributes stated again.
CREATE OR REPLACE FUNCTION tidings.record_outcomes_v1(
    p_outcomes jsonb,
    p_health_endpoint_ids bigint[],
    p_has_success boolean[],
    p_trailing_failures integer[],
    p_last_success_at timestamptz[],
    p_last_failure_at timestamptz[],
    p_disable_ids bigint[],
    p_disable_reasons text[],
    p_base_cooldown_s double precision,
    p_max_cooldown_s double precision,
    OUT written_ids bigint[],
    OUT transitions json,
    OUT disabled_ids bigint[]
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_lifecycle jsonb;
BEGIN
    WITH outcome AS (
        SELECT *
        FROM jsonb_to_recordset(p_outcomes)
            AS o(id bigint, token uuid, endpoint_id bigint, status tidings.message_status,
                 retry_at timestamptz, keep_lease boolean, attempt_number integer,
                 attempted_at timestamptz, status_code integer, response_ms integer,
                 error_class text, excerpt text)
    ),
    written AS (
        UPDATE tidings.messages m
        SET status = o.status,
            attempts = m.attempts + 1,
            delivered_at = CASE WHEN o.status = 'delivered' THEN now() END,
            dead_lettered_at = CASE WHEN o.status = 'dead_letter' THEN now() END,
            -- A new dead letter is one the scheduled report has yet to report.
            dead_letter_reported_at = NULL,
            next_attempt_at = CASE WHEN o.status = 'failed' THEN o.retry_at
                                   ELSE m.next_attempt_at END,
            lease_token = CASE WHEN o.status = 'failed' AND o.keep_lease THEN m.lease_token END,
            last_error = o.error_class,
            last_status_code = o.status_code,
            last_response_ms = o.response_ms
        FROM outcome o
        WHERE m.id = o.id
          AND m.lease_token = o.token
          AND m.attempts = o.attempt_number - 1
          -- Only in-flight and failed rows carry a lease token, so this means "in flight".
          AND m.status <> 'failed'
        RETURNING m.id, m.status, m.attempts, m.endpoint_id, m.event_type, m.dead_lettered_at
    ),
    logged AS (
        INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,
                                      status_code, response_ms, error_class, response_excerpt)
        SELECT o.id, o.endpoint_id, o.attempt_number, o.attempted_at,
               o.status_code, o.response_ms, o.error_class, o.excerpt
        FROM outcome o
        ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
        RETURNING message_id, endpoint_id
    ),
    recorded_before AS (
        -- This very attempt was logged already (attempted_at is the sender's own clock reading),
        -- so its insert above did nothing: an earlier call committed, and its answer was lost
        -- with the connection. Read off the insert, not looked up in attempts again.
        SELECT o.id
        FROM outcome o
        WHERE NOT EXISTS (SELECT 1 FROM logged l WHERE l.message_id = o.id)
    ),
    summary AS (
        SELECT *
        FROM unnest(p_health_endpoint_ids, p_has_success, p_trailing_failures,
                    p_last_success_at, p_last_failure_at)
            AS s(endpoint_id, has_success, trailing_failures, last_success_at, last_failure_at)
    ),
    counted AS (
        -- The summaries to apply: a batch written a second time counts once (only endpoints
        -- whose attempts were new), and a batch of successes against a closed circuit without
        -- failures, whose last success is already known to the second, changes nothing. Read
        -- without a lock: another sender's uncommitted failure is then simply ordered after it.
        -- (An endpoint that never succeeded has no last success: NULL must not skip it.)
        SELECT s.*
        FROM summary s
        JOIN tidings.endpoint_health h ON h.endpoint_id = s.endpoint_id
        WHERE (s.endpoint_id IN (SELECT l.endpoint_id FROM logged l)
               OR NOT EXISTS (SELECT 1 FROM outcome))
          AND NOT (s.trailing_failures = 0 AND h.state = 'closed'
                   AND h.consecutive_failures = 0
                   AND h.last_success_at IS NOT NULL
                   AND h.last_success_at >= s.last_success_at - interval '1 second')
    ),
    before AS (
        -- Locking returns each row's newest committed version, so what follows computes from it.
        SELECT h.endpoint_id, h.state, h.consecutive_failures, h.failure_threshold, h.cooldown_s,
               h.opened_at, h.probe_token, h.probe_started_at, h.last_success_at,
               h.last_failure_at
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id IN (SELECT c.endpoint_id FROM counted c)
        ORDER BY h.endpoint_id
        FOR UPDATE
    ),
    next_state AS (
        SELECT b.*, s.has_success, s.trailing_failures,
               CASE
                   WHEN s.has_success THEN
                       CASE WHEN s.trailing_failures >= b.failure_threshold
                            THEN 'open' ELSE 'closed' END
                   WHEN s.trailing_failures = 0 THEN b.state::text
                   WHEN b.state = 'half_open' THEN 'open'
                   WHEN b.state = 'closed'
                        AND b.consecutive_failures + s.trailing_failures >= b.failure_threshold
                       THEN 'open'
                   ELSE b.state::text
               END::tidings.circuit_state AS new_state,
               greatest(b.last_success_at, s.last_success_at) AS new_last_success_at,
               greatest(b.last_failure_at, s.last_failure_at) AS new_last_failure_at
        FROM counted s
        JOIN before b ON b.endpoint_id = s.endpoint_id
    ),
    health AS (
        UPDATE tidings.endpoint_health h
        SET consecutive_failures = CASE WHEN n.has_success THEN n.trailing_failures
                                        ELSE n.consecutive_failures + n.trailing_failures END,
            state = n.new_state,
            cooldown_s = CASE
                WHEN n.has_success THEN p_base_cooldown_s
                -- A circuit that opens from closed waits the configured cooldown, whatever the
                -- health row was created with.
                WHEN n.state = 'closed' AND n.new_state = 'open' THEN p_base_cooldown_s
                WHEN n.state = 'half_open' AND n.trailing_failures > 0
                    THEN least(n.cooldown_s * 2, p_max_cooldown_s)
                ELSE n.cooldown_s END,
            opened_at = CASE
                WHEN n.new_state <> 'open' THEN NULL
                WHEN n.has_success OR n.state <> 'open' THEN now()
                ELSE n.opened_at END,
            probe_token = CASE WHEN n.new_state = 'half_open' THEN n.probe_token END,
            probe_started_at = CASE WHEN n.new_state = 'half_open' THEN n.probe_started_at END,
            last_success_at = n.new_last_success_at,
            last_failure_at = n.new_last_failure_at
        FROM next_state n
        WHERE h.endpoint_id = n.endpoint_id
        RETURNING h.endpoint_id, h.state, h.cooldown_s, h.consecutive_failures,
                  h.failure_threshold, h.last_success_at, h.last_failure_at
    ),
    disabled AS (
        UPDATE tidings.endpoints e
        SET enabled = false, disabled_reason = d.reason, disabled_at = now(), updated_at = now()
        FROM unnest(p_disable_ids, p_disable_reasons) AS d(id, reason)
        WHERE e.id = d.id AND e.enabled
          -- For an attempt logged now, as the health summaries count (a batch written a second
          -- time disables nothing).
          AND (e.id IN (SELECT l.endpoint_id FROM logged l) OR NOT EXISTS (SELECT 1 FROM outcome))
        RETURNING e.id, e.app_id, e.url, e.disabled_reason, e.disabled_at
    ),
    message_change AS (
        -- Messages dead-lettered, and those failing for the Nth time that will be retried.
        SELECT w.id, w.endpoint_id, w.event_type, w.attempts, w.dead_lettered_at,
               CASE WHEN w.status = 'dead_letter' THEN 'message.attempt.exhausted'
                    ELSE 'message.attempt.failing' END AS event_type_out
        FROM written w
        WHERE w.status = 'dead_letter'
           OR (w.status = 'failed'
               AND w.attempts = (SELECT s.value FROM tidings.settings s
                                 WHERE s.name = 'operational_failing_attempt'))
    ),
    crossing AS (
        -- The highest share of the failure threshold this batch's failures reached from below
        -- (a run of failures counts from its last success), and first successes after a run that
        -- reached half of it.
        SELECT h.endpoint_id, h.consecutive_failures, h.failure_threshold,
               h.last_success_at, h.last_failure_at, b.last_success_at AS old_last_success_at,
               b.consecutive_failures AS old_failures,
               (SELECT max(l.pct) FROM (VALUES (50), (70), (90), (100)) AS l(pct)
                WHERE h.consecutive_failures >= ceil(h.failure_threshold * l.pct / 100.0)
                  AND (n.has_success
                       OR b.consecutive_failures < ceil(h.failure_threshold * l.pct / 100.0)))
                   AS pct,
               n.has_success
                   AND b.consecutive_failures >= ceil(b.failure_threshold * 50 / 100.0)
                   AS recovered
        FROM health h
        JOIN before b ON b.endpoint_id = h.endpoint_id
        JOIN next_state n ON n.endpoint_id = h.endpoint_id
        WHERE h.consecutive_failures <> b.consecutive_failures
    ),
    lifecycle AS (
        SELECT jsonb_build_object(
                   'event_type', mc.event_type_out,
                   'event_id', 'msg_' || mc.id || '.' ||
                       CASE WHEN mc.event_type_out = 'message.attempt.exhausted'
                            THEN 'exhausted.' || extract(epoch FROM mc.dead_lettered_at)::numeric
                            ELSE 'failing' END,
                   'application_id', e.app_id, 'application_uid', a.uid,
                   'endpoint_id', e.id, 'endpoint_url', e.url,
                   'data', jsonb_build_object(
                       'message_id', mc.id, 'event_type', mc.event_type,
                       'attempt_count', mc.attempts,
                       'last_attempt', jsonb_build_object(
                           'status_code', o.status_code, 'error_class', o.error_class,
                           'attempted_at', tidings.lifecycle_time(o.attempted_at)))) AS element
        FROM message_change mc
        JOIN outcome o ON o.id = mc.id
        JOIN tidings.endpoints e ON e.id = mc.endpoint_id
        JOIN tidings.applications a ON a.id = e.app_id
        UNION ALL
        SELECT jsonb_build_object(
                   'event_type', CASE WHEN k.failing THEN 'endpoint.failing'
                                      ELSE 'endpoint.recovered' END,
                   'event_id', 'ep_' || c.endpoint_id || '.' ||
                       CASE WHEN k.failing
                            THEN 'failing.' || coalesce(
                                     extract(epoch FROM c.last_success_at)::numeric::text,
                                     'never') || '.' || c.pct
                            ELSE 'recovered.' || coalesce(
                                     extract(epoch FROM c.old_last_success_at)::numeric::text,
                                     'never') || '.' ||
                                 extract(epoch FROM c.last_success_at)::numeric END,
                   'application_id', e.app_id, 'application_uid', a.uid,
                   'endpoint_id', e.id, 'endpoint_url', e.url,
                   'data', CASE WHEN k.failing THEN jsonb_build_object(
                               'consecutive_failures', c.consecutive_failures,
                               'failure_threshold', c.failure_threshold,
                               'threshold_percent', c.pct,
                               'last_failure_at', tidings.lifecycle_time(c.last_failure_at))
                           ELSE jsonb_build_object(
                               'failed_attempts', c.old_failures,
                               'recovered_at', tidings.lifecycle_time(c.last_success_at))
                           END)
        FROM crossing c
        -- A batch can end one run of failures (recovered) and start another that reaches a
        -- level (failing): both are reported.
        CROSS JOIN (VALUES (true), (false)) AS k(failing)
        JOIN tidings.endpoints e ON e.id = c.endpoint_id
        JOIN tidings.applications a ON a.id = e.app_id
        WHERE (k.failing AND c.pct IS NOT NULL) OR (NOT k.failing AND c.recovered)
        UNION ALL
        SELECT jsonb_build_object(
                   'event_type', 'endpoint.disabled',
                   'event_id', 'ep_' || d.id || '.disabled.' ||
                       extract(epoch FROM d.disabled_at)::numeric,
                   'application_id', d.app_id, 'application_uid', a.uid,
                   'endpoint_id', d.id, 'endpoint_url', d.url,
                   'data', jsonb_build_object(
                       'reason', 'gone', 'detail', d.disabled_reason,
                       'disabled_at', tidings.lifecycle_time(d.disabled_at)))
        FROM disabled d
        JOIN tidings.applications a ON a.id = d.app_id
    )
    SELECT (SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}')
            FROM (SELECT id FROM written UNION SELECT id FROM recorded_before) w),
           (SELECT coalesce(json_agg(json_build_object(
                        'endpoint_id', h.endpoint_id, 'from', b.state, 'to', h.state,
                        'cooldown_s', h.cooldown_s) ORDER BY h.endpoint_id), '[]')
            FROM health h JOIN before b ON b.endpoint_id = h.endpoint_id
            WHERE h.state <> b.state),
           (SELECT coalesce(array_agg(d.id ORDER BY d.id), '{}') FROM disabled d),
           (SELECT jsonb_agg(l.element) FROM lifecycle l)
    INTO written_ids, transitions, disabled_ids, v_lifecycle;

    IF v_lifecycle IS NOT NULL THEN
        PERFORM tidings.emit_lifecycle_v1(v_lifecycle);
    END IF;
END $$;
ALTER FUNCTION tidings.record_outcomes_v1(jsonb, bigint[], boolean[], integer[], timestamptz[],
                                          timestamptz[], bigint[], text[], double precision,
                                          double precision)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
