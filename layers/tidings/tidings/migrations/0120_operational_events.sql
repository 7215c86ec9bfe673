-- Operational events: Tidings tells the producer's own systems what happened to endpoints and
-- messages, as events of one designated application (the operational application), delivered to
-- the endpoints an operator subscribes there like any other: same fan-out, retries, signing and
-- portal. Each event is written in the transaction of the change it reports, so a crash can
-- neither lose one nor report a change that rolled back.
--
-- Locks: tidings.settings (tiny, read only by SQL functions) is altered under ACCESS EXCLUSIVE;
-- the one new application row takes a row lock; record_outcomes_v1 is replaced in place (same
-- arguments, so grants stay), its attributes stated again.

-- Settings that are text, beside the numeric ones: a row holds exactly one kind of value.
ALTER TABLE tidings.settings
    DROP CONSTRAINT settings_name_check,
    ALTER COLUMN value DROP NOT NULL,
    ADD COLUMN text_value text,
    ADD CONSTRAINT settings_name_check
        CHECK (name IN ('max_payload_bytes', 'operational_application',
                        'operational_failing_attempt')),
    ADD CONSTRAINT settings_one_value CHECK (num_nonnulls(value, text_value) = 1);

-- The operational application, under the uid of the deployment's
-- TIDINGS_OPERATIONAL_APPLICATION (Settings.operational_application), whose default it has;
-- the migrator writes the setting (and makes an application of another uid it names) at the end
-- of every run (tidings.logic.schema.prepare_database). message.attempt.failing reports a
-- message's Nth failed attempt, N being TIDINGS_OPERATIONAL_FAILING_ATTEMPT.
INSERT INTO tidings.applications (uid, name)
VALUES ('tidings-operational', 'Tidings operational events')
ON CONFLICT (uid) DO NOTHING;
INSERT INTO tidings.settings (name, text_value) VALUES ('operational_application', 'tidings-operational');
INSERT INTO tidings.settings (name, value) VALUES ('operational_failing_attempt', 4);

-- emit_lifecycle_v1: records operational events as events of the operational application,
-- through enqueue_batch's fan-out (so channels, filters and the idempotency key apply). Each
-- element names: event_type, event_id (derived from the change, so a statement sent again after
-- a lost connection makes no second event), application_id, application_uid, endpoint_id,
-- endpoint_url, and data (the fields of its type). The payload is the four common fields and
-- data; the element carries channels = [application_uid], so that an operational endpoint can
-- take one application's events. Events about the operational application's own endpoints are
-- dropped (no loops), and so is everything while the operational application is missing or
-- deleted: reporting must never fail the change it reports. For the same reason an event whose
-- payload is over the deployment's payload limit (TIDINGS_MAX_PAYLOAD_BYTES, which enqueue_batch
-- holds producers' events to; an endpoint's long URL or many event types can pass a limit set
-- low) is left out and named in a warning, measured as enqueue_batch measures (0091), so that
-- what is written is never refused (it would fail the person's change, or every outcome of the
-- sender's batch). The events are written by enqueue_into_v1 (0100), past the refusal that keeps
-- every caller of enqueue_batch out of the operational application (0124).
CREATE FUNCTION tidings.emit_lifecycle_v1(p_events jsonb) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_uid     text;
    v_app_id  bigint;
    v_limit   bigint;
    v_events  jsonb;
    v_skipped text;
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) <> 'array' OR jsonb_array_length(p_events) = 0 THEN
        RETURN 0;
    END IF;
    SELECT s.text_value, a.id INTO v_uid, v_app_id
    FROM tidings.settings s
    JOIN tidings.applications a ON a.uid = s.text_value AND a.deleted_at IS NULL
    WHERE s.name = 'operational_application'
    -- Held as enqueue_batch holds an application: a deletion waits for this transaction.
    FOR KEY SHARE OF a;
    IF v_uid IS NULL THEN
        RETURN 0;
    END IF;
    SELECT s.value INTO v_limit FROM tidings.settings s WHERE s.name = 'max_payload_bytes';
    SELECT jsonb_agg(jsonb_build_object(
               'event_type', b.event_type, 'event_id', b.event_id,
               'channels', jsonb_build_array(b.application_uid), 'payload', b.payload)
               ORDER BY b.ord) FILTER (WHERE b.fits),
           string_agg(b.event_type || ' ' || b.event_id, ', ' ORDER BY b.ord)
               FILTER (WHERE NOT b.fits)
    INTO v_events, v_skipped
    FROM (
        SELECT p.*,
               -- jsonb's text only adds spaces to the compact text: within the limit, it fits;
               -- over twice the limit, it cannot; in between, the exact count decides.
               octet_length(p.payload::text) <= v_limit
               OR (octet_length(p.payload::text) <= 2 * v_limit
                   AND tidings.compact_json_bytes(p.payload::text) <= v_limit) AS fits
        FROM (
            SELECT input.ord, e ->> 'event_type' AS event_type, e ->> 'event_id' AS event_id,
                   e ->> 'application_uid' AS application_uid,
                   jsonb_build_object(
                       'application_id', (e ->> 'application_id')::bigint,
                       'application_uid', e ->> 'application_uid',
                       'endpoint_id', (e ->> 'endpoint_id')::bigint,
                       'endpoint_url', e ->> 'endpoint_url')
                   || coalesce(e -> 'data', '{}'::jsonb) AS payload
            FROM jsonb_array_elements(p_events) WITH ORDINALITY AS input (e, ord)
            WHERE e ->> 'application_uid' IS DISTINCT FROM v_uid
        ) p
    ) b;
    IF v_skipped IS NOT NULL THEN
        RAISE WARNING 'tidings.emit_lifecycle_v1: over the payload limit of % bytes, not recorded: %',
            v_limit, v_skipped;
    END IF;
    IF v_events IS NULL THEN
        RETURN 0;
    END IF;
    -- Straight into the operational application, which enqueue_batch refuses to everyone else
    -- (0124).
    PERFORM 1 FROM tidings.enqueue_into_v1(v_events, v_app_id, v_uid);
    RETURN jsonb_array_length(v_events);
END $$;

-- lifecycle_time: a time as operational payloads write it, RFC 3339 in UTC whatever the
-- session's time zone.
CREATE FUNCTION tidings.lifecycle_time(p_at timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT pg_catalog.to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- record_outcomes_v1 as in 0041_delivery_functions.sql, now also reporting, in the same
-- transaction, what its changes mean to the producer's systems:
--   message.attempt.exhausted  a message dead-lettered by its attempt (its final error);
--   message.attempt.failing    a message's Nth failed attempt that will be retried (N the
--                              operational_failing_attempt setting), once per message;
--   endpoint.failing           consecutive failures reaching 50, 70, 90 or 100 % of the
--                              circuit's failure threshold (the highest level crossed, once per
--                              crossing in a run of failures);
--   endpoint.recovered         the first success after a run that reached 50 %;
--   endpoint.disabled          an endpoint that answered 410 Gone (reason "gone").
-- The candidates are read off rows the statement writes anyway, filtered to those few; a batch
-- in which nothing crosses a threshold builds no event and calls nothing more. Run again after a
-- lost connection, it writes nothing again, so it reports nothing again (and the event ids,
-- derived from the change, are the idempotency key besides); in particular an endpoint that
-- answered 410 is disabled only for an attempt this call logs, so outcomes recorded again do not
-- disable a second time an endpoint a person re-enabled in between.
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

-- The operators' and the API's changes to endpoints, and the health monitor's disabling, report
-- through this function in their own statements; producers and the sender never call it
-- directly (record_outcomes_v1 runs as the owner).
GRANT EXECUTE ON FUNCTION tidings.emit_lifecycle_v1(jsonb), tidings.lifecycle_time(timestamptz)
    TO tidings_ingest, tidings_operator, tidings_health_monitor;

-- The health monitor reports a client certificate about to expire (endpoint.certificate.expiring),
-- naming it by its fingerprint, which the redacted form holds.
GRANT SELECT (shown) ON tidings.endpoint_credentials TO tidings_health_monitor;
