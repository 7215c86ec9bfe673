-- name: claim_due
-- Leases up to batch_size due rows (pending or failed rows whose time has come, and in-flight
-- rows whose lease expired) in one statement, with SKIP LOCKED so that concurrent claimers never
-- wait for each other nor take the same row. Fair across endpoints: each endpoint with due work
-- gets an equal share of the batch. Skips disabled endpoints and open circuits; an endpoint whose
-- cooldown has passed (or whose probe went stale) gets one row, the candidate probe. A rate-limited
-- endpoint gets no more rows than its token bucket holds, and the bucket is debited here; its
-- health row is locked (SKIP LOCKED) so two claimers cannot spend the same tokens. Claims no
-- more than max_in_flight rows in all: leasing faster than senders deliver would only let leases
-- expire in the queue and the rows be claimed again.
WITH capacity AS (
    SELECT least(%(batch_size)s, greatest(0, %(max_in_flight)s - count(*)))::integer AS n
    FROM (
        SELECT 1 FROM tidings.messages
        WHERE status = 'in_flight' AND next_attempt_at > now()
        LIMIT %(max_in_flight)s
    ) leased_now
),
candidate AS (
    -- Enabled endpoints whose circuit lets something through: closed, cooled down after opening,
    -- or half open with a probe gone stale.
    SELECT e.id AS endpoint_id, e.rate_limit_per_s, h.state
    FROM tidings.endpoints e
    JOIN tidings.endpoint_health h ON h.endpoint_id = e.id
    WHERE e.enabled AND e.deleted_at IS NULL
      AND (h.state = 'closed'
           OR (h.state = 'open' AND h.opened_at + h.cooldown_s * interval '1 second' <= now())
           OR (h.state = 'half_open'
               AND h.probe_started_at + %(lease_s)s * interval '1 second' <= now()))
),
bucket AS (
    -- The token buckets of rate-limited candidates, read under a lock (SKIP LOCKED: a bucket
    -- another claimer holds is skipped this round).
    SELECT h.endpoint_id,
           least(greatest(c.rate_limit_per_s, 1),
                 h.rate_tokens
                 + extract(epoch FROM now() - h.rate_refilled_at) * c.rate_limit_per_s) AS tokens
    FROM candidate c
    JOIN tidings.endpoint_health h ON h.endpoint_id = c.endpoint_id
    WHERE c.rate_limit_per_s IS NOT NULL
    FOR UPDATE OF h SKIP LOCKED
),
eligible AS (
    SELECT c.endpoint_id,
           least(CASE WHEN c.state = 'closed' THEN %(batch_size)s ELSE 1 END,
                 CASE WHEN c.rate_limit_per_s IS NULL THEN %(batch_size)s
                      ELSE floor(b.tokens)::integer END) AS allowance
    FROM candidate c
    LEFT JOIN bucket b ON b.endpoint_id = c.endpoint_id
    WHERE c.rate_limit_per_s IS NULL OR b.endpoint_id IS NOT NULL
),
active AS (
    SELECT g.endpoint_id, g.allowance
    FROM eligible g
    WHERE g.allowance > 0
      AND EXISTS (
          SELECT 1 FROM tidings.messages q
          WHERE q.endpoint_id = g.endpoint_id
            AND q.status IN ('pending', 'failed', 'in_flight')
            AND q.next_attempt_at <= now())
),
share AS (
    SELECT greatest(1, ceil((SELECT n FROM capacity)::numeric / greatest(count(*), 1)))::integer
               AS per_endpoint
    FROM active
),
picked AS (
    SELECT due.id, due.endpoint_id
    FROM active a
    CROSS JOIN share s
    CROSS JOIN LATERAL (
        SELECT q.id, q.endpoint_id
        FROM tidings.messages q
        WHERE q.endpoint_id = a.endpoint_id
          AND q.status IN ('pending', 'failed', 'in_flight')
          AND q.next_attempt_at <= now()
        ORDER BY q.next_attempt_at
        LIMIT least(s.per_endpoint, a.allowance)
        FOR UPDATE OF q SKIP LOCKED
    ) due
    LIMIT (SELECT n FROM capacity)
),
leased AS (
    UPDATE tidings.messages m
    SET status = 'in_flight',
        lease_token = gen_random_uuid(),
        next_attempt_at = now() + %(lease_s)s * interval '1 second'
    -- An id array, not a join: the planner then fetches the rows by primary key.
    WHERE m.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING m.id, m.endpoint_id, m.event_ref, m.event_type, m.attempts, m.lease_token
),
spent AS (
    UPDATE tidings.endpoint_health h
    SET rate_tokens = l.tokens - c.taken, rate_refilled_at = now()
    FROM bucket l
    JOIN (SELECT endpoint_id, count(*) AS taken FROM picked GROUP BY endpoint_id) c
        USING (endpoint_id)
    WHERE h.endpoint_id = l.endpoint_id
)
SELECT l.id, l.endpoint_id, l.event_type, ev.event_id, l.attempts, l.lease_token,
       CASE WHEN octet_length(ev.payload::text) <= %(inline_payload_bytes)s
            THEN ev.payload::text END AS payload
FROM leased l
CROSS JOIN LATERAL (
    SELECT e.event_id, e.payload FROM tidings.events e WHERE e.id = l.event_ref
) ev
ORDER BY l.id;

-- name: release_leases
-- Gives leased rows back without an attempt (their queue message could not be sent), due again
-- after delay_s. Guarded by the lease token: a row leased again meanwhile is left alone.
UPDATE tidings.messages m
SET status = CASE WHEN m.attempts > 0 THEN 'failed' ELSE 'pending' END::tidings.message_status,
    lease_token = NULL,
    next_attempt_at = now() + %(delay_s)s * interval '1 second'
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS r(id, token)
WHERE m.id = r.id
  AND m.lease_token = r.token
  AND m.status IN ('in_flight', 'failed')
RETURNING m.id;

-- name: begin_attempts
-- A sender starts work on queued rows: keeps the rows it still holds (lease token matches, and
-- the queue message is for the row's next attempt: a copy of an earlier message, which a queue
-- may deliver again, is stale), decides per row whether the endpoint's circuit lets it through,
-- and returns what it needs to send. Exactly one probe per half-open endpoint: the probe slot is
-- taken by an atomic update of the health row, so of many senders racing for it only one wins.
-- Rows the circuit holds back return to the database queue, due when the cooldown ends, without
-- counting an attempt. The updates check the lease again: a row leased anew while this statement
-- waited for it is left to its new holder and absent from the result.
WITH request AS (
    SELECT r.id, r.token, r.attempt, r.want_payload
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(attempts)s::integer[],
                %(want_payload)s::boolean[])
        AS r(id, token, attempt, want_payload)
),
held AS (
    SELECT m.id, m.endpoint_id, r.token, r.attempt, r.want_payload
    FROM tidings.messages m
    JOIN request r ON r.id = m.id AND m.lease_token = r.token AND m.attempts = r.attempt - 1
    WHERE m.status IN ('in_flight', 'failed')
),
probe AS (
    UPDATE tidings.endpoint_health h
    SET state = 'half_open', probe_token = c.token, probe_started_at = now()
    FROM (SELECT DISTINCT ON (endpoint_id) endpoint_id, token FROM held ORDER BY endpoint_id, id) c
    WHERE h.endpoint_id = c.endpoint_id
      AND ((h.state = 'open' AND h.opened_at + h.cooldown_s * interval '1 second' <= now())
           OR (h.state = 'half_open'
               AND h.probe_started_at + %(lease_s)s * interval '1 second' <= now()))
    RETURNING h.endpoint_id, h.probe_token
),
verdict AS (
    SELECT held.id, held.endpoint_id, held.token, held.attempt, held.want_payload,
           coalesce(e.enabled AND e.deleted_at IS NULL
                    AND (h.state = 'closed'
                         OR (h.state = 'half_open' AND h.probe_token = held.token)
                         OR p.probe_token = held.token),
                    false) AS permitted,
           CASE WHEN h.state = 'open' THEN h.opened_at + h.cooldown_s * interval '1 second' END
               AS cooldown_ends_at
    FROM held
    JOIN tidings.endpoints e ON e.id = held.endpoint_id
    JOIN tidings.endpoint_health h ON h.endpoint_id = held.endpoint_id
    LEFT JOIN probe p ON p.endpoint_id = held.endpoint_id
),
started AS (
    UPDATE tidings.messages m
    SET status = 'in_flight', next_attempt_at = now() + %(lease_s)s * interval '1 second'
    FROM verdict v
    WHERE m.id = v.id AND v.permitted
      AND m.lease_token = v.token AND m.attempts = v.attempt - 1
    RETURNING m.id
),
held_back AS (
    UPDATE tidings.messages m
    SET status = CASE WHEN m.attempts > 0 THEN 'failed' ELSE 'pending' END::tidings.message_status,
        lease_token = NULL,
        next_attempt_at = greatest(v.cooldown_ends_at,
                                   now() + %(hold_back_s)s * interval '1 second')
    FROM verdict v
    WHERE m.id = v.id AND NOT v.permitted
      AND m.lease_token = v.token AND m.attempts = v.attempt - 1
    RETURNING m.id
)
SELECT v.id, v.endpoint_id, v.id IN (SELECT id FROM started) AS permitted,
       m.event_type, ev.event_id, m.attempts,
       coalesce(m.max_attempts, e.max_attempts) AS max_attempts,
       e.url, e.timeout_ms, e.secret,
       CASE WHEN e.previous_secret_expires_at > now() THEN e.previous_secret END AS previous_secret,
       CASE WHEN v.want_payload THEN ev.payload::text END AS payload
FROM verdict v
JOIN tidings.messages m ON m.id = v.id
JOIN tidings.endpoints e ON e.id = v.endpoint_id
JOIN tidings.events ev ON ev.id = m.event_ref
WHERE v.id IN (SELECT id FROM started) OR v.id IN (SELECT id FROM held_back)
ORDER BY v.id;

-- name: record_outcomes
-- Writes the outcomes of a batch of attempts in one atomic statement: each row finished,
-- rescheduled or dead-lettered (only while the caller's lease token still holds it, so a stale
-- sender never overwrites a newer outcome); every attempt logged in one multi-row insert; each
-- endpoint's circuit updated once, from the batch's summary, with its health row locked in
-- endpoint order so that concurrent senders cannot deadlock; endpoints that answered 410 disabled.
-- Safe to send again after a lost connection: attempts already logged are not logged twice and
-- their endpoints' circuits are not counted twice (health summaries given without any outcome
-- are always applied), and the rows an earlier run of the same outcomes wrote are returned as
-- written again, so the caller still sends their retry messages.
-- Returns the rows written, the circuit transitions and the endpoints disabled.
WITH outcome AS (
    -- One JSON document rather than a dozen arrays: far cheaper to build and to parse.
    SELECT *
    FROM jsonb_to_recordset(%(outcomes)s::jsonb)
        AS o(id bigint, token uuid, endpoint_id bigint, outcome text, retry_at timestamptz,
             keep_lease boolean, attempt_number integer, attempted_at timestamptz,
             status_code integer, response_ms integer, error_class text, excerpt text)
),
written AS (
    UPDATE tidings.messages m
    SET status = CASE o.outcome WHEN 'delivered' THEN 'delivered'
                                WHEN 'retry' THEN 'failed'
                                ELSE 'dead_letter' END::tidings.message_status,
        attempts = m.attempts + 1,
        delivered_at = CASE WHEN o.outcome = 'delivered' THEN now() END,
        dead_lettered_at = CASE WHEN o.outcome = 'dead_letter' THEN now() END,
        -- A new dead letter is one the scheduled report has yet to report.
        dead_letter_reported_at = NULL,
        next_attempt_at = CASE WHEN o.outcome = 'retry' THEN o.retry_at ELSE m.next_attempt_at END,
        lease_token = CASE WHEN o.outcome = 'retry' AND o.keep_lease THEN m.lease_token END,
        last_error = o.error_class,
        last_status_code = o.status_code,
        last_response_ms = o.response_ms
    FROM outcome o
    WHERE m.id = ANY (%(ids)s::bigint[])
      AND m.id = o.id
      AND m.lease_token = o.token
      -- Only in-flight and failed rows carry a lease token, so this means "in flight". Said
      -- so because the planner, seeing few in-flight rows in its statistics, would expect
      -- none and choose a plan that is slow when there are many.
      AND m.status <> 'failed'
    RETURNING m.id
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
    -- This very attempt was logged already (attempted_at is the sender's own clock reading), so
    -- its insert above did nothing: an earlier run of this statement committed, and its answer
    -- was lost with the connection. Read off the insert, not looked up in attempts again.
    SELECT o.id
    FROM outcome o
    WHERE NOT EXISTS (SELECT 1 FROM logged l WHERE l.message_id = o.id)
),
summary AS (
    SELECT *
    FROM unnest(%(health_endpoint_ids)s::bigint[], %(has_success)s::boolean[],
                %(trailing_failures)s::integer[], %(last_success_at)s::timestamptz[],
                %(last_failure_at)s::timestamptz[])
        AS s(endpoint_id, has_success, trailing_failures, last_success_at, last_failure_at)
),
before AS (
    -- Locking returns each row's newest committed version, so what follows computes from it.
    SELECT h.endpoint_id, h.state, h.consecutive_failures, h.failure_threshold, h.cooldown_s,
           h.opened_at, h.probe_token, h.probe_started_at, h.last_success_at, h.last_failure_at
    FROM tidings.endpoint_health h
    WHERE h.endpoint_id IN (SELECT endpoint_id FROM summary)
      -- A batch written a second time counts once: only endpoints whose attempts were new.
      AND (h.endpoint_id IN (SELECT endpoint_id FROM logged)
           OR NOT EXISTS (SELECT 1 FROM outcome))
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
    FROM summary s
    JOIN before b ON b.endpoint_id = s.endpoint_id
),
health AS (
    UPDATE tidings.endpoint_health h
    SET consecutive_failures = CASE WHEN n.has_success THEN n.trailing_failures
                                    ELSE n.consecutive_failures + n.trailing_failures END,
        state = n.new_state,
        cooldown_s = CASE
            WHEN n.has_success THEN %(base_cooldown_s)s
            -- A circuit that opens from closed waits the configured cooldown, whatever the
            -- health row was created with.
            WHEN n.state = 'closed' AND n.new_state = 'open' THEN %(base_cooldown_s)s
            WHEN n.state = 'half_open' AND n.trailing_failures > 0
                THEN least(n.cooldown_s * 2, %(max_cooldown_s)s)
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
    RETURNING h.endpoint_id, h.state, h.cooldown_s
),
disabled AS (
    UPDATE tidings.endpoints e
    SET enabled = false, disabled_reason = d.reason, disabled_at = now(), updated_at = now()
    FROM unnest(%(disable_ids)s::bigint[], %(disable_reasons)s::text[]) AS d(id, reason)
    WHERE e.id = d.id AND e.enabled
    RETURNING e.id
)
SELECT (SELECT coalesce(array_agg(id ORDER BY id), '{}')
        FROM (SELECT id FROM written UNION SELECT id FROM recorded_before) w) AS written_ids,
       (SELECT coalesce(json_agg(json_build_object(
                    'endpoint_id', h.endpoint_id, 'from', b.state, 'to', h.state,
                    'cooldown_s', h.cooldown_s) ORDER BY h.endpoint_id), '[]')
        FROM health h JOIN before b USING (endpoint_id)
        WHERE h.state <> b.state) AS transitions,
       (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM disabled) AS disabled_ids;
