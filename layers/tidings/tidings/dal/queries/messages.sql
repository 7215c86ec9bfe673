-- name: get_message
-- One message of an application's endpoints with its event (key, payload text and channels), and
-- what decides when it is sent: its lease, its endpoint's state, circuit and speed lane (as the claim
-- tells it) with its own cap and its rows in flight under a live lease (counted up to 1000, the
-- largest cap; through queue_in_flight), and, for a message in a FIFO line, its
-- ordering key, the line's head (its id and status) and whether the line is paused, read at one
-- moment (now() is that moment).
SELECT m.id, m.endpoint_id, m.event_type, ev.event_id, m.status::text AS status, m.attempts,
       m.max_attempts, m.created_at, m.next_attempt_at, m.delivered_at, m.dead_lettered_at,
       m.last_error, m.last_status_code, m.last_response_ms, ev.example,
       ev.payload::text AS payload,
       coalesce(ev.channels, '{}') AS channels, m.lease_token IS NOT NULL AS leased,
       e.enabled AS endpoint_enabled, e.deleted_at IS NOT NULL AS endpoint_deleted,
       e.disabled_reason, e.rate_limit_per_s, e.max_in_flight,
       coalesce(h.state::text, 'closed') AS circuit_state, h.opened_at AS circuit_opened_at,
       coalesce(h.cooldown_s, 0) AS circuit_cooldown_s,
       coalesce(h.slow_until > now(), false) AS slow_lane,
       CASE WHEN h.slow_until > now() THEN h.slow_until END AS slow_until,
       (h.last_success_at IS NULL AND h.last_failure_at IS NULL) AS untried,
       (SELECT count(*)::integer
        FROM (SELECT 1 FROM tidings.queue f
              WHERE f.endpoint_id = m.endpoint_id
                AND f.status = 'in_flight'
                AND f.next_attempt_at > now()
              LIMIT 1000) leased_now) AS in_flight,
       ev.ordering_key, m.line_key IS NOT NULL AS in_line, e.ordering,
       lh.id AS line_head_id, lh.status::text AS line_head_status,
       fl.paused_at AS line_paused_at,
       now() AS db_now
FROM tidings.messages m
JOIN tidings.events ev ON ev.id = m.event_ref
JOIN tidings.endpoints e ON e.id = m.endpoint_id
LEFT JOIN tidings.endpoint_health h ON h.endpoint_id = m.endpoint_id
LEFT JOIN tidings.fifo_lines fl ON fl.endpoint_id = m.endpoint_id AND fl.ordering_key = m.line_key
LEFT JOIN tidings.messages lh
    ON lh.endpoint_id = fl.endpoint_id AND lh.line_key = fl.ordering_key
   AND lh.line_seq = fl.head_seq
WHERE m.id = %(message_id)s AND e.app_id = %(app_id)s

-- name: attempts_of_message
-- Every recorded HTTP attempt of one message of an application's endpoints, in the order they
-- were made: those that did not deliver it (the attempt log's partitions, and attempts_kept for
-- days whose partition was dropped while the message was kept) and the one that did (its row).
SELECT h.attempt_number, h.attempted_at, h.status_code, h.response_ms, h.error_class,
       h.response_excerpt
FROM (
    SELECT a.id, a.attempt_number, a.attempted_at, a.status_code, a.response_ms, a.error_class,
           a.response_excerpt
    FROM tidings.attempt_log a
    WHERE a.message_id = %(message_id)s
    UNION ALL
    SELECT k.id, k.attempt_number, k.attempted_at, k.status_code, k.response_ms, k.error_class,
           k.response_excerpt
    FROM tidings.attempts_kept k
    WHERE k.message_id = %(message_id)s
    UNION ALL
    SELECT NULL, m.attempts, m.last_attempted_at, m.last_status_code, m.last_response_ms,
           NULL, m.last_excerpt
    FROM tidings.message_rows m
    WHERE m.id = %(message_id)s AND m.status = 'delivered' AND m.last_attempted_at IS NOT NULL
) h
WHERE EXISTS (SELECT 1 FROM tidings.message_rows m
              JOIN tidings.endpoints e ON e.id = m.endpoint_id
              WHERE m.id = %(message_id)s AND e.app_id = %(app_id)s)
ORDER BY h.attempted_at, h.attempt_number, h.id

-- name: list_messages
-- A page of the messages of an application's endpoints, newest first, before the cursor id (NULL
-- for the first page), optionally filtered by status, endpoint, event type and creation time
-- (since inclusive, until exclusive); one extra row tells whether a next page exists.
SELECT m.id, m.endpoint_id, m.event_type, ev.event_id, m.status::text AS status, m.attempts,
       m.max_attempts, m.created_at, m.next_attempt_at, m.delivered_at, m.dead_lettered_at,
       m.last_error, m.last_status_code, m.last_response_ms, ev.example
FROM tidings.messages m
JOIN tidings.events ev ON ev.id = m.event_ref
JOIN tidings.endpoints e ON e.id = m.endpoint_id
WHERE e.app_id = %(app_id)s
  AND (%(before_id)s::bigint IS NULL OR m.id < %(before_id)s::bigint)
  AND (%(status)s::text IS NULL OR m.status = %(status)s::tidings.message_status)
  AND (%(endpoint_id)s::bigint IS NULL OR m.endpoint_id = %(endpoint_id)s::bigint)
  AND (%(event_type)s::text IS NULL OR m.event_type = %(event_type)s::text)
  AND (%(since)s::timestamptz IS NULL OR m.created_at >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR m.created_at < %(until)s::timestamptz)
ORDER BY m.id DESC
LIMIT %(limit)s + 1

-- name: replay_dead_letters
-- Puts up to batch_size dead letters of an application's endpoints that match every given filter (message ids, endpoint,
-- dead-lettered time range; NULL means no filter) back in the queue, pending and due now, with
-- the attempt count reset and no report mark (should one die again, the scheduled report names
-- it again); their attempts rows stay. Endpoints that are deleted are skipped. Rows another
-- transaction holds (the dead-letter report while it publishes, a concurrent replay) are waited
-- for, not skipped: a replay must requeue every match. Locks are taken in id order, so two
-- replays cannot deadlock; a row a concurrent replay requeued meanwhile drops out of this batch
-- on the recheck, so a batch can come back short while more match: callers repeat until one is
-- empty.
WITH chosen AS (
    SELECT m.id
    FROM tidings.message_rows m
    JOIN tidings.endpoints e ON e.id = m.endpoint_id
    WHERE m.dead_lettered_at IS NOT NULL AND m.status = 'dead_letter'
      AND e.app_id = %(app_id)s
      AND e.deleted_at IS NULL
      AND (%(message_ids)s::bigint[] IS NULL OR m.id = ANY (%(message_ids)s::bigint[]))
      AND (%(endpoint_id)s::bigint IS NULL OR m.endpoint_id = %(endpoint_id)s::bigint)
      AND (%(since)s::timestamptz IS NULL OR m.dead_lettered_at >= %(since)s::timestamptz)
      AND (%(until)s::timestamptz IS NULL OR m.dead_lettered_at < %(until)s::timestamptz)
    ORDER BY m.id
    LIMIT %(batch_size)s
    FOR UPDATE OF m
),
replayed AS (
    UPDATE tidings.message_rows m
    SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_lettered_at = NULL,
        dead_letter_reported_at = NULL
    FROM chosen
    WHERE m.id = chosen.id
    RETURNING m.id, m.endpoint_id, m.line_key, m.line_seq
),
queued AS (
    INSERT INTO tidings.queue (message_id, endpoint_id, status, next_attempt_at, line_key,
                               line_seq)
    SELECT r.id, r.endpoint_id, 'pending', now(), r.line_key, r.line_seq
    FROM replayed r
)
SELECT r.id FROM replayed r

-- name: messages_outside_application
-- Of the given message ids, those that are not messages of the application's endpoints (in
-- ascending order): a replay that names one is refused as a request for an unknown message.
SELECT wanted.id
FROM unnest(%(message_ids)s::bigint[]) AS wanted (id)
WHERE NOT EXISTS (SELECT 1 FROM tidings.message_rows m
                  JOIN tidings.endpoints e ON e.id = m.endpoint_id
                  WHERE m.id = wanted.id AND e.app_id = %(app_id)s)
ORDER BY wanted.id

-- name: endpoint_of_application
-- Whether the endpoint exists in the application, deleted or not (a replay may name a deleted
-- endpoint's history; another application's endpoint is refused as an unknown one).
SELECT EXISTS (SELECT 1 FROM tidings.endpoints e
               WHERE e.id = %(endpoint_id)s AND e.app_id = %(app_id)s)

-- name: resend_message
-- Starts a new delivery of a delivered or dead-lettered message of an application's endpoints,
-- whose endpoint is enabled and not deleted: back in the queue, pending and due now, a fresh
-- attempt budget (attempts 0), no lease token (an outcome of the old delivery that arrives late
-- finds no row to write to), no report mark; its attempts and its id (so its webhook-id) stay:
-- the attempt that delivered it, kept on its row, joins the attempt log. Answers with the
-- message as it is now, and why it was not resent otherwise (its status and its endpoint's
-- state; nothing when the application has no such message).
WITH target AS (
    SELECT m.id, e.enabled AND e.deleted_at IS NULL AS endpoint_open,
           e.deleted_at IS NOT NULL AS endpoint_deleted
    FROM tidings.message_rows m
    JOIN tidings.endpoints e ON e.id = m.endpoint_id
    WHERE m.id = %(message_id)s AND e.app_id = %(app_id)s
),
chosen AS (
    SELECT m.id, m.endpoint_id, m.attempts, m.status, m.last_attempted_at, m.last_status_code,
           m.last_response_ms, m.last_excerpt
    FROM tidings.message_rows m
    JOIN target t ON t.id = m.id
    WHERE t.endpoint_open AND m.status IN ('delivered', 'dead_letter')
    FOR UPDATE OF m
),
kept AS (
    INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number, attempted_at,
                                     status_code, response_ms, response_excerpt)
    SELECT c.id, c.endpoint_id, c.attempts, c.last_attempted_at, c.last_status_code,
           c.last_response_ms, c.last_excerpt
    FROM chosen c
    WHERE c.status = 'delivered' AND c.last_attempted_at IS NOT NULL
    ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
),
resent AS (
    UPDATE tidings.message_rows m
    SET status = 'pending', attempts = 0, next_attempt_at = now(), delivered_at = NULL,
        dead_lettered_at = NULL, dead_letter_reported_at = NULL, last_attempted_at = NULL,
        last_excerpt = NULL
    FROM chosen c
    WHERE m.id = c.id
    RETURNING m.id, m.endpoint_id, m.event_ref, m.event_type, m.status, m.attempts, m.max_attempts,
              m.created_at, m.next_attempt_at, m.delivered_at, m.dead_lettered_at, m.last_error,
              m.last_status_code, m.last_response_ms, m.line_key, m.line_seq
),
queued AS (
    INSERT INTO tidings.queue (message_id, endpoint_id, status, next_attempt_at, line_key,
                               line_seq)
    SELECT r.id, r.endpoint_id, 'pending', r.next_attempt_at, r.line_key, r.line_seq
    FROM resent r
),
now_is AS (
    SELECT r.id, r.endpoint_id, r.event_ref, r.event_type, r.status, r.attempts, r.max_attempts,
           r.created_at, r.next_attempt_at, r.delivered_at, r.dead_lettered_at, r.last_error,
           r.last_status_code, r.last_response_ms
    FROM resent r
    UNION ALL
    SELECT m.id, m.endpoint_id, m.event_ref, m.event_type, m.status, m.attempts, m.max_attempts,
           m.created_at, m.next_attempt_at, m.delivered_at, m.dead_lettered_at, m.last_error,
           m.last_status_code, m.last_response_ms
    FROM tidings.messages m
    WHERE m.id = %(message_id)s AND NOT EXISTS (SELECT 1 FROM resent)
)
SELECT n.id, n.endpoint_id, n.event_type, ev.event_id, n.status::text AS status, n.attempts,
       n.max_attempts, n.created_at, n.next_attempt_at, n.delivered_at, n.dead_lettered_at,
       n.last_error, n.last_status_code, n.last_response_ms, ev.example,
       EXISTS (SELECT 1 FROM resent) AS resent, t.endpoint_open, t.endpoint_deleted
FROM now_is n
JOIN target t ON t.id = n.id
JOIN tidings.events ev ON ev.id = n.event_ref

-- name: recovery_candidates
-- The ids, in order, of one endpoint's messages created in [since, until) that are not delivered
-- and not being attempted: dead letters (through message_rows_dead_letters; a message created
-- at or after since died after it too) and failed messages awaiting a retry (through
-- queue_claimable).
SELECT c.id
FROM (
    SELECT m.id
    FROM tidings.message_rows m
    WHERE m.endpoint_id = %(endpoint_id)s
      AND m.dead_lettered_at IS NOT NULL AND m.status = 'dead_letter'
      AND m.dead_lettered_at >= %(since)s
      AND m.created_at >= %(since)s
      AND m.created_at < %(until)s
    UNION ALL
    SELECT q.message_id
    FROM tidings.queue q
    JOIN tidings.message_rows m ON m.id = q.message_id
    WHERE q.endpoint_id = %(endpoint_id)s
      AND q.status = 'failed'
      AND m.created_at >= %(since)s
      AND m.created_at < %(until)s
) c
ORDER BY c.id

-- name: recover_messages
-- Starts a new delivery of those of the given messages of one endpoint that are still dead
-- letters or awaiting a retry: pending, due now, attempts reset, no lease token (a retry message
-- already in the queue, and any late outcome of the old delivery, no longer hold the row), no
-- report mark; attempts rows stay. Locks are taken in id order and waited for; a row that
-- changed meanwhile (replayed, resent, delivered) is rechecked and left out: what the lock
-- returns is the row as it is now. Returns the ids.
WITH chosen AS (
    SELECT m.id, m.endpoint_id, m.status, m.line_key, m.line_seq
    FROM tidings.message_rows m
    WHERE m.id = ANY (%(ids)s::bigint[])
      AND m.endpoint_id = %(endpoint_id)s
    ORDER BY m.id
    FOR UPDATE OF m
),
requeued AS (
    UPDATE tidings.queue q
    SET status = 'pending', next_attempt_at = now(), lease_token = NULL
    FROM chosen c
    WHERE q.message_id = c.id AND q.status = 'failed'
    RETURNING q.message_id
),
revived AS (
    INSERT INTO tidings.queue (message_id, endpoint_id, status, next_attempt_at, line_key,
                               line_seq)
    SELECT c.id, c.endpoint_id, 'pending', now(), c.line_key, c.line_seq
    FROM chosen c
    WHERE c.status = 'dead_letter'
    RETURNING message_id
),
reset AS (
    UPDATE tidings.message_rows m
    SET status = 'pending', attempts = 0, next_attempt_at = now(), dead_lettered_at = NULL,
        dead_letter_reported_at = NULL
    FROM (SELECT r.message_id FROM requeued r UNION ALL SELECT v.message_id FROM revived v) r
    WHERE m.id = r.message_id
    RETURNING m.id
)
SELECT id FROM reset
