-- What each group role may do: exactly what the statements its holders run need (the statements
-- are listed per role in tidings.dal.access; a test connects as a member of each role, runs them
-- all, and revokes each privilege below in turn to show that some statement then fails).
-- Columns are named wherever a role needs only some of a table's: only the sender reads signing
-- secrets (through begin_attempts_v1), only the ingest API and operators write them (through
-- set_endpoint_secret_v1), and nobody reads the columns where an earlier release kept them.
-- Payloads (events.payload) and response excerpts (attempts.response_excerpt) are read only by
-- the API and operators; the claimer and sender reach payloads through their functions.

-- Which role may call which function: by name, every overload (whatever arguments a release
-- gives them; a name with no function is an error). Producers get their two entry points and
-- nothing else; the hot functions and the partition upkeep run with their owner's rights
-- (0071_database_roles.sql), so EXECUTE is all their callers need.
DO $$
DECLARE
    v_grant record;
    v_function regprocedure;
BEGIN
    FOR v_grant IN
        SELECT g.function_name, g.role_name
        FROM (VALUES
            ('enqueue', 'tidings_producer'),
            ('enqueue_batch', 'tidings_producer'),
            ('claim_due_v1', 'tidings_claimer'),
            ('release_leases_v1', 'tidings_claimer'),
            ('begin_attempts_v1', 'tidings_sender'),
            ('record_outcomes_v1', 'tidings_sender'),
            ('release_leases_v1', 'tidings_sender'),
            ('enqueue_event', 'tidings_ingest'),
            ('enqueue_batch', 'tidings_ingest'),
            ('set_endpoint_secret_v1', 'tidings_ingest'),
            ('enqueue', 'tidings_operator'),
            ('enqueue_event', 'tidings_operator'),
            ('set_endpoint_secret_v1', 'tidings_operator'),
            ('analyze_latency_histograms', 'tidings_percentiles'),
            ('ensure_attempt_partitions', 'tidings_pruner'),
            ('oldest_attempt_partition', 'tidings_pruner'),
            ('keep_live_attempts', 'tidings_pruner'),
            ('drop_attempt_partition', 'tidings_pruner')
        ) AS g(function_name, role_name)
    LOOP
        FOR v_function IN
            SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'tidings'::regnamespace AND p.proname = v_grant.function_name
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', v_function, v_grant.role_name);
        END LOOP;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'no function tidings.% to grant to %', v_grant.function_name,
                v_grant.role_name;
        END IF;
    END LOOP;
END $$;

-- Every role reaches the schema's objects by name.
GRANT USAGE ON SCHEMA tidings TO tidings_producer, tidings_claimer, tidings_sender,
    tidings_ingest, tidings_authorizer, tidings_percentiles, tidings_health_monitor, tidings_dead_letter_report,
    tidings_pruner, tidings_operator;

-- Sender: the data keys that seal the secrets it signs with.
GRANT SELECT (id, master_key, wrapped) ON tidings.data_keys TO tidings_sender;

-- The ingest API and operators share the endpoint, message and secret statements.
DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['tidings_ingest', 'tidings_operator'] LOOP
        EXECUTE format($grants$
            GRANT SELECT (id, app_id, url, description, enabled, disabled_reason, disabled_at,
                          deleted_at, max_attempts, retry_schedule, timeout_ms,
                          rate_limit_per_s, created_at, updated_at),
                  INSERT (app_id, url, description, max_attempts, retry_schedule, timeout_ms,
                          rate_limit_per_s),
                  UPDATE (url, description, enabled, disabled_reason, disabled_at, deleted_at,
                          max_attempts, retry_schedule, timeout_ms, rate_limit_per_s,
                          updated_at)
                ON tidings.endpoints TO %1$I;
            GRANT SELECT, INSERT, DELETE ON tidings.subscriptions TO %1$I;
            GRANT SELECT (endpoint_id, state, consecutive_failures, failure_threshold,
                          cooldown_s, opened_at, last_success_at, last_failure_at, p50_ms,
                          p95_ms, p99_ms, sample_count, percentiles_at)
                ON tidings.endpoint_health TO %1$I;
            GRANT SELECT (id, event_ref, endpoint_id, event_type, status, attempts, max_attempts,
                          created_at, next_attempt_at, delivered_at, dead_lettered_at,
                          lease_token, last_error, last_status_code, last_response_ms),
                  UPDATE (status, attempts, next_attempt_at, delivered_at, dead_lettered_at,
                          dead_letter_reported_at, lease_token, last_error)
                ON tidings.messages TO %1$I;
            GRANT SELECT (id, event_id, payload) ON tidings.events TO %1$I;
            GRANT SELECT (id, message_id, attempt_number, attempted_at, status_code, response_ms,
                          error_class, response_excerpt)
                ON tidings.attempts TO %1$I;
            GRANT SELECT (id, message_id, attempt_number, attempted_at, status_code, response_ms,
                          error_class, response_excerpt)
                ON tidings.attempts_kept TO %1$I;
            GRANT SELECT (id, uid, name, metadata, created_at, updated_at, deleted_at),
                  INSERT (uid, name, metadata),
                  UPDATE (name, metadata, updated_at, deleted_at)
                ON tidings.applications TO %1$I;
            GRANT SELECT (id, prefix, scope, app_id, description, created_at, expires_at,
                          revoked_at),
                  INSERT (prefix, hash, scope, app_id, description, expires_at),
                  UPDATE (revoked_at)
                ON tidings.tokens TO %1$I;
            GRANT SELECT (endpoint_id, expires_at), DELETE ON tidings.endpoint_secrets TO %1$I;
            GRANT SELECT (id, master_key, wrapped, created_at), INSERT (master_key, wrapped)
                ON tidings.data_keys TO %1$I;
        $grants$, v_role);
    END LOOP;
END $$;

-- The authorizer: a token by its prefix, its application's state, the API key made for it.
GRANT SELECT (id, prefix, hash, scope, app_id, expires_at, revoked_at, usage_key_id),
      UPDATE (usage_key_id)
    ON tidings.tokens TO tidings_authorizer;
GRANT SELECT (id, uid, deleted_at) ON tidings.applications TO tidings_authorizer;

-- Operators alone: the status view and dead letters read the attempt log's times and codes.
GRANT SELECT (endpoint_id, attempted_at, status_code) ON tidings.attempts TO tidings_operator;

-- Percentiles.
GRANT SELECT (endpoint_id, attempted_at, response_ms) ON tidings.attempts TO tidings_percentiles;
GRANT SELECT, INSERT, UPDATE, DELETE ON tidings.latency_buckets, tidings.latency_window
    TO tidings_percentiles;
GRANT SELECT (job, rolled_to, window_from, window_s, details, updated_at),
      INSERT (job),
      UPDATE (rolled_to, window_from, window_s, details, updated_at)
    ON tidings.job_state TO tidings_percentiles;
GRANT SELECT (endpoint_id, failure_threshold, sample_count, percentile_buckets,
              percentile_below, percentile_at, p50_ms, p95_ms, p99_ms),
      UPDATE (p50_ms, p95_ms, p99_ms, sample_count, percentile_buckets, percentile_below,
              percentile_at, percentiles_at, failure_threshold)
    ON tidings.endpoint_health TO tidings_percentiles;

-- Health monitor.
GRANT SELECT (id, app_id, url, enabled, disabled_reason, deleted_at),
      UPDATE (enabled, disabled_reason, disabled_at, updated_at)
    ON tidings.endpoints TO tidings_health_monitor;
GRANT SELECT (endpoint_id, state, opened_at, p95_ms, sample_count, last_success_at,
              last_failure_at, failing_since),
      UPDATE (failing_since)
    ON tidings.endpoint_health TO tidings_health_monitor;
GRANT SELECT (id, endpoint_id, status, created_at, next_attempt_at, delivered_at,
              dead_lettered_at),
      UPDATE (status, dead_lettered_at, dead_letter_reported_at, lease_token, last_error)
    ON tidings.messages TO tidings_health_monitor;
GRANT SELECT (endpoint_id, attempted_at, status_code) ON tidings.attempts
    TO tidings_health_monitor;
GRANT SELECT, INSERT, UPDATE ON tidings.alerts TO tidings_health_monitor;
GRANT SELECT, INSERT, UPDATE, DELETE ON tidings.alert_outbox TO tidings_health_monitor;
GRANT SELECT (id, uid, deleted_at) ON tidings.applications TO tidings_health_monitor;
GRANT SELECT (job, rolled_to), INSERT (job, rolled_to), UPDATE (rolled_to, updated_at)
    ON tidings.job_state TO tidings_health_monitor;

-- Dead-letter report.
GRANT SELECT (id, endpoint_id, status, attempts, dead_lettered_at, dead_letter_reported_at,
              last_error, last_status_code),
      UPDATE (dead_letter_reported_at)
    ON tidings.messages TO tidings_dead_letter_report;
GRANT SELECT (id, app_id, url) ON tidings.endpoints TO tidings_dead_letter_report;
GRANT SELECT (id, uid) ON tidings.applications TO tidings_dead_letter_report;

-- Pruner. (Its row locks on messages need UPDATE on one column; it deletes them anyway.)
GRANT SELECT, DELETE ON tidings.attempts_default TO tidings_pruner;
GRANT SELECT (id, event_ref, status, delivered_at, dead_lettered_at, dead_letter_reported_at),
      UPDATE (dead_letter_reported_at),
      DELETE
    ON tidings.messages TO tidings_pruner;
-- (Locking events to delete them needs UPDATE on one column: created_at, which nothing reads
-- but the pruner.)
GRANT SELECT (id, created_at), UPDATE (created_at), DELETE ON tidings.events TO tidings_pruner;
GRANT SELECT (message_id), DELETE ON tidings.attempts_kept TO tidings_pruner;
GRANT SELECT (id, expires_at), DELETE ON tidings.endpoint_secrets TO tidings_pruner;
