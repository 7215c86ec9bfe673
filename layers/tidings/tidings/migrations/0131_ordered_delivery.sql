-- Ordered delivery: FIFO endpoints, per ordering key, optionally batched.
--
-- An endpoint with ordering 'fifo' receives its messages in lines, one per ordering key of the
-- events (events without a key share one line, ordering_key '' here). In each line only the
-- head is attempted: the other messages are 'waiting' (0130), outside the claim's index, so a
-- line's backlog costs the claim nothing and the claim itself is unchanged. A line moves on when
-- its head is delivered or dead-lettered (or pauses at a dead letter, fifo_on_dead_letter
-- 'pause'); different keys are different lines and proceed in parallel.
--
-- Positions: a message's place in its line is line_seq, drawn from one sequence in the order
-- the events were accepted (a batch's in its own order). Lines are rows of tidings.fifo_lines,
-- written only by the functions that move lines on ("advancers": the sender after it recorded a
-- head's outcome, the claimer, and the API's replay, resume and reordering), never by a
-- producer: a producer's transaction inserts its waiting messages and a note in
-- tidings.fifo_line_moves that their line may move, and takes no lock any advancer waits for. An
-- advancer locks the line's row, deletes its notes, and decides in a later statement (whose
-- snapshot is younger than the lock, so it sees every message whose note it deleted) which
-- message heads the line. A note that no advancer could take (its line was locked) stays for
-- the claimer's next round.
--
-- Locks: the catalog of endpoints, events and messages (columns with constant defaults or none;
-- constraints on the large tables NOT VALID, since every existing row has NULL there), new tables,
-- a new sequence and functions. The indexes come in 0132, built concurrently.

ALTER TABLE tidings.endpoints
    ADD COLUMN ordering text NOT NULL DEFAULT 'none'
        CONSTRAINT endpoints_ordering_check CHECK (ordering IN ('none', 'fifo')),
    ADD COLUMN fifo_batch_size integer NOT NULL DEFAULT 1
        CONSTRAINT endpoints_fifo_batch_size_check CHECK (fifo_batch_size BETWEEN 1 AND 100),
    ADD COLUMN fifo_on_dead_letter text NOT NULL DEFAULT 'continue'
        CONSTRAINT endpoints_fifo_on_dead_letter_check
        CHECK (fifo_on_dead_letter IN ('continue', 'pause'));

ALTER TABLE tidings.events ADD COLUMN ordering_key text;
ALTER TABLE tidings.events ADD CONSTRAINT events_ordering_key_check
    CHECK (ordering_key IS NULL OR length(ordering_key) BETWEEN 1 AND 200) NOT VALID;

-- line_key: the line a message of a FIFO endpoint is in (NULL: none); line_seq: its place;
-- line_batch_through: for a head sent in batches, the place of the last message its batch
-- carries (fixed at its first attempt, so every retry sends the same messages).
ALTER TABLE tidings.messages
    ADD COLUMN line_key text,
    ADD COLUMN line_seq bigint,
    ADD COLUMN line_batch_through bigint;
ALTER TABLE tidings.messages ADD CONSTRAINT messages_line_place_check
    CHECK ((line_key IS NULL) = (line_seq IS NULL)) NOT VALID;
ALTER TABLE tidings.messages ADD CONSTRAINT messages_waiting_in_a_line_check
    CHECK (status <> 'waiting' OR line_key IS NOT NULL) NOT VALID;

CREATE SEQUENCE tidings.line_positions AS bigint;

-- head_seq: the place of the line's head (pending, failed or in flight; or the dead letter that
-- paused the line); NULL when nothing of the line is on its way.
CREATE TABLE tidings.fifo_lines (
    endpoint_id  bigint NOT NULL REFERENCES tidings.endpoints (id),
    ordering_key text NOT NULL,
    head_seq     bigint,
    paused_at    timestamptz,
    PRIMARY KEY (endpoint_id, ordering_key),
    CONSTRAINT fifo_lines_paused_at_a_head CHECK (paused_at IS NULL OR head_seq IS NOT NULL)
);

CREATE TABLE tidings.fifo_line_moves (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id  bigint NOT NULL,
    ordering_key text NOT NULL
);
CREATE INDEX fifo_line_moves_by_line ON tidings.fifo_line_moves (endpoint_id, ordering_key);

-- allocate_line_positions: n places from the sequence, ascending. Whatever order nextval is
-- evaluated in, sorting the values drawn and numbering them gives the k-th place to the k-th
-- message of the caller's order (callers join on the number).
CREATE FUNCTION tidings.allocate_line_positions(n bigint)
RETURNS TABLE (rank bigint, seq bigint)
LANGUAGE sql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
    SELECT row_number() OVER (ORDER BY d.seq), d.seq
    FROM (SELECT nextval('tidings.line_positions') AS seq
          FROM generate_series(1, greatest(n, 0))) d
$$;

-- enqueue_into_v1 (0100) replaced in place (same arguments; nobody is granted it): events may
-- carry an ordering_key, and a FIFO endpoint's messages wait in their line.
CREATE OR REPLACE FUNCTION tidings.enqueue_into_v1(events jsonb, p_app_id bigint, application text)
RETURNS TABLE (item integer, event_ref bigint, created boolean, message_ids bigint[])
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_app_id    bigint := p_app_id;
    v_types     text[];
    v_ids       text[];
    v_payloads  jsonb[];
    v_targets   jsonb[];
    v_channels  jsonb[];
    v_keys      jsonb[];
    v_count     integer;
    v_bad       record;
    v_created   bigint[];
    v_where     text;
    v_limit     bigint;
    v_live      boolean;
BEGIN
    IF events IS NULL OR jsonb_typeof(events) <> 'array' THEN
        RAISE EXCEPTION 'tidings.enqueue: events must be a JSON array' USING ERRCODE = '22023';
    END IF;
    v_count := jsonb_array_length(events);
    IF v_count = 0 THEN
        RETURN;
    END IF;

    SELECT array_agg(CASE WHEN jsonb_typeof(e -> 'event_type') = 'string' THEN e ->> 'event_type' END
                     ORDER BY ord),
           array_agg(CASE
                         WHEN e -> 'event_id' IS NULL OR jsonb_typeof(e -> 'event_id') = 'null'
                             THEN gen_random_uuid()::text
                         WHEN jsonb_typeof(e -> 'event_id') = 'string' THEN e ->> 'event_id'
                     END ORDER BY ord),
           array_agg(e -> 'payload' ORDER BY ord),
           array_agg(e -> 'endpoint_ids' ORDER BY ord),
           array_agg(e -> 'channels' ORDER BY ord),
           array_agg(e -> 'ordering_key' ORDER BY ord)
    INTO v_types, v_ids, v_payloads, v_targets, v_channels, v_keys
    FROM jsonb_array_elements(events) WITH ORDINALITY AS input (e, ord);

    -- The first bad element, named by its position, so the caller can point at the field.
    SELECT u.ord - 1 AS pos,
           CASE
               WHEN u.event_type IS NULL OR u.event_type = '' THEN 'event_type'
               WHEN length(u.event_type) > 200 THEN 'event_type_length'
               WHEN u.payload IS NULL OR jsonb_typeof(u.payload) = 'null' THEN 'payload'
               WHEN u.event_id IS NULL OR u.event_id = '' OR length(u.event_id) > 200 THEN 'event_id'
               WHEN u.targets IS NOT NULL AND jsonb_typeof(u.targets) NOT IN ('array', 'null')
                   THEN 'endpoint_ids'
               WHEN c.bad THEN 'channels'
               WHEN k.bad THEN 'ordering_key'
           END AS problem
    INTO v_bad
    FROM unnest(v_types, v_ids, v_payloads, v_targets, v_channels, v_keys) WITH ORDINALITY
         AS u (event_type, event_id, payload, targets, channels, ordering_key, ord)
    -- ordering_key: absent, null, or a string of 1 to 200 characters.
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_typeof(u.ordering_key), 'null') <> 'null' AND (
                   jsonb_typeof(u.ordering_key) <> 'string'
                   OR length(u.ordering_key #>> '{}') NOT BETWEEN 1 AND 200) AS bad
    ) k
    -- channels: absent, null, or an array of at most 10 channel names (the uid syntax).
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_typeof(u.channels), 'null') <> 'null' AND (
                   jsonb_typeof(u.channels) <> 'array'
                   OR jsonb_array_length(u.channels) > 10
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(u.channels) AS n (name)
                              WHERE jsonb_typeof(n.name) <> 'string'
                                 OR (n.name #>> '{}') !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$'))
               AS bad
    ) c
    WHERE u.event_type IS NULL OR u.event_type = '' OR length(u.event_type) > 200
       OR u.payload IS NULL OR jsonb_typeof(u.payload) = 'null'
       OR u.event_id IS NULL OR u.event_id = '' OR length(u.event_id) > 200
       OR (u.targets IS NOT NULL AND jsonb_typeof(u.targets) NOT IN ('array', 'null'))
       OR c.bad OR k.bad
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %', format('%s%s', replace(v_where, '].', ']: '), CASE v_bad.problem
                WHEN 'event_type' THEN 'event_type must be a non-empty string'
                WHEN 'event_type_length' THEN 'event_type is longer than 200 characters'
                WHEN 'payload' THEN 'payload must not be null'
                WHEN 'event_id' THEN 'event_id must be 1 to 200 characters'
                WHEN 'channels' THEN 'channels must be an array of at most 10 channel names, '
                    'each 1 to 200 letters, digits, ''.'', ''_'', '':'' or ''-'', starting with a '
                    'letter or digit'
                WHEN 'ordering_key' THEN 'ordering_key must be a string of 1 to 200 characters'
                ELSE 'endpoint_ids must be an array of endpoint ids'
            END)
            USING ERRCODE = '22023',
                  DETAIL = v_where || CASE WHEN v_bad.problem = 'event_type_length'
                                           THEN 'event_type' ELSE v_bad.problem END;
    END IF;

    -- Payloads over the deployment's limit, measured as the API measures them: the JSON text
    -- without insignificant whitespace, in UTF-8 bytes. jsonb's own text only adds a space after
    -- each separator, so a payload whose text fits needs no closer look, and one whose text is
    -- over twice the limit is over it (at most every other byte is such a space): the exact
    -- count (a scan of the text) is left to the few in between.
    SELECT s.value INTO v_limit FROM tidings.settings s WHERE s.name = 'max_payload_bytes';
    SELECT p.ord - 1 AS pos,
           CASE WHEN octet_length(p.text) <= 2 * v_limit
                THEN tidings.compact_json_bytes(p.text) END AS size
    INTO v_bad
    FROM (SELECT u.ord, u.payload::text AS text
          FROM unnest(v_payloads) WITH ORDINALITY AS u (payload, ord)) p
    WHERE octet_length(p.text) > v_limit
      AND (octet_length(p.text) > 2 * v_limit OR tidings.compact_json_bytes(p.text) > v_limit)
    ORDER BY p.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %payload is %; the limit is % bytes',
            replace(v_where, '].', ']: '),
            coalesce(v_bad.size || ' bytes', format('over %s bytes', 2 * v_limit)), v_limit
            USING ERRCODE = '54000', DETAIL = v_where || 'payload',
                  HINT = 'the limit is the deployment''s TIDINGS_MAX_PAYLOAD_BYTES';
    END IF;

    -- Named endpoints must exist in the application and not be deleted (a disabled one is
    -- skipped, not refused). Another application's endpoint is refused as an unknown one is.
    SELECT t.ord - 1 AS pos,
           array_agg(t.wanted ORDER BY t.wanted) AS unknown
    INTO v_bad
    FROM (
        SELECT u.ord,
               CASE WHEN jsonb_typeof(w.value) = 'number'
                         AND w.value::text ~ '^[0-9]{1,19}$'
                         AND w.value::text::numeric <= 9223372036854775807
                    THEN w.value::text::bigint END AS wanted
        FROM unnest(v_targets) WITH ORDINALITY AS u (targets, ord)
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(u.targets) = 'array' THEN u.targets ELSE '[]' END) AS w
    ) t
    WHERE t.wanted IS NULL OR NOT EXISTS (
        SELECT 1 FROM tidings.endpoints e
        WHERE e.id = t.wanted AND e.app_id = v_app_id AND e.deleted_at IS NULL)
    GROUP BY t.ord
    ORDER BY t.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %unknown endpoint ids: %',
            replace(v_where, '].', ']: '), v_bad.unknown
            USING ERRCODE = '23503', DETAIL = v_where || 'endpoint_ids';
    END IF;

    -- New events in key order, then their fan-out in one statement, which writes nothing if the
    -- application is deleted in its snapshot (the one its endpoints are read in).
    WITH live AS (
        SELECT 1 FROM tidings.applications a WHERE a.id = v_app_id AND a.deleted_at IS NULL
    ),
    firsts AS (
        SELECT DISTINCT ON (u.event_type, u.event_id) u.event_type, u.event_id, u.payload, u.targets,
               CASE WHEN jsonb_typeof(u.channels) = 'array' AND jsonb_array_length(u.channels) > 0
                    THEN ARRAY(SELECT jsonb_array_elements_text(u.channels)) END AS channels,
               u.ordering_key #>> '{}' AS ordering_key, u.ord
        FROM unnest(v_types, v_ids, v_payloads, v_targets, v_channels, v_keys) WITH ORDINALITY
             AS u (event_type, event_id, payload, targets, channels, ordering_key, ord)
        WHERE EXISTS (SELECT 1 FROM live)
        ORDER BY u.event_type, u.event_id, u.ord
    ),
    inserted AS (
        INSERT INTO tidings.events AS ev (app_id, event_type, event_id, payload, channels,
                                          ordering_key)
        SELECT v_app_id, f.event_type, f.event_id, f.payload, f.channels, f.ordering_key
        FROM firsts f
        ORDER BY f.event_type, f.event_id
        ON CONFLICT ON CONSTRAINT events_idempotency_key DO NOTHING
        RETURNING ev.id, ev.event_type, ev.event_id
    ),
    -- Each new event's targets: the named endpoints, or else the subscribers of its type in its
    -- application (found through subscriptions_by_app_and_type, so the cost follows those
    -- subscribers, neither the application's other endpoints nor other applications'). The two
    -- branches exclude each other, so "named" tells which one an endpoint came from.
    targets AS (
        SELECT i.id AS event_ref, i.event_type, f.payload, f.channels, f.ordering_key, f.ord,
               t.endpoint_id, t.named
        FROM inserted i
        JOIN firsts f ON f.event_type = i.event_type AND f.event_id = i.event_id
        CROSS JOIN LATERAL (
            SELECT s.endpoint_id, false AS named
            FROM tidings.subscriptions s
            WHERE jsonb_typeof(f.targets) IS DISTINCT FROM 'array'
              AND s.app_id = v_app_id
              AND s.event_type IN (i.event_type, '*')
            UNION
            SELECT named.value::bigint, true
            FROM jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(f.targets) = 'array' THEN f.targets ELSE '[]' END) AS named
        ) t
    ),
    -- A subscriber's channels and filter decide on the endpoint row read here (not in targets:
    -- a second read of endpoints there led the planner to run the subscribers' look-up once per
    -- event and endpoint). A subscriber with channels needs one of the event's; its filter sees
    -- the payload and the event type (as $"event_type"). Named endpoints take the event as is.
    routed AS MATERIALIZED (
        SELECT t.event_ref, e.id AS endpoint_id, t.event_type, t.ord,
               CASE WHEN e.ordering = 'fifo' THEN coalesce(t.ordering_key, '') END AS line_key
        FROM targets t
        JOIN tidings.endpoints e ON e.id = t.endpoint_id
        WHERE e.enabled AND e.deleted_at IS NULL AND e.app_id = v_app_id
          AND (t.named
               OR ((e.channels IS NULL OR e.channels && t.channels)
                   AND (e.filter_path IS NULL
                        OR jsonb_path_match(t.payload, e.filter_path,
                                            jsonb_build_object('event_type', t.event_type),
                                            true))))
    ),
    -- A FIFO endpoint's messages wait in their line, placed in the order the events came in
    -- (the batch's order: the events themselves are inserted in key order); the line's advancer
    -- makes the first of an idle line its head (tidings.advance_lines_v1, called by the claimer).
    in_line AS (
        SELECT r.event_ref, r.endpoint_id,
               row_number() OVER (ORDER BY r.ord, r.endpoint_id) AS rank
        FROM routed r
        WHERE r.line_key IS NOT NULL
    ),
    placed AS (
        SELECT l.event_ref, l.endpoint_id, p.seq
        FROM in_line l
        JOIN tidings.allocate_line_positions((SELECT count(*) FROM in_line)) p ON p.rank = l.rank
    ),
    fanned AS (
        INSERT INTO tidings.messages (event_ref, endpoint_id, event_type, status, line_key,
                                      line_seq)
        SELECT r.event_ref, r.endpoint_id, r.event_type,
               CASE WHEN r.line_key IS NULL THEN 'pending'
                    ELSE 'waiting' END::tidings.message_status,
               r.line_key, p.seq
        FROM routed r
        LEFT JOIN placed p ON p.event_ref = r.event_ref AND p.endpoint_id = r.endpoint_id
        ORDER BY r.event_ref, r.endpoint_id
        RETURNING endpoint_id, line_key
    ),
    noted AS (
        INSERT INTO tidings.fifo_line_moves (endpoint_id, ordering_key)
        SELECT DISTINCT f.endpoint_id, f.line_key FROM fanned f WHERE f.line_key IS NOT NULL
    )
    -- (noted runs to completion although nothing reads it: PostgreSQL always does that.)
    SELECT array_agg(i.id), EXISTS (SELECT 1 FROM live) INTO v_created, v_live FROM inserted i;
    IF NOT v_live THEN
        RAISE EXCEPTION 'tidings.enqueue: unknown application: %', application
            USING ERRCODE = '23503', DETAIL = 'application';
    END IF;

    -- Each key is looked up through the unique index (a correlated subquery is never turned
    -- into a scan of the whole events table, whatever the planner's row estimates).
    RETURN QUERY
        SELECT (k.ord - 1)::integer,
               k.ref,
               k.ref = ANY (coalesce(v_created, '{}'))
                   AND k.ord = min(k.ord) OVER (PARTITION BY k.ref),
               coalesce((SELECT array_agg(m.id ORDER BY m.id)
                         FROM tidings.messages m WHERE m.event_ref = k.ref), '{}')
        FROM (
            SELECT u.ord,
                   (SELECT ev.id FROM tidings.events ev
                    WHERE ev.app_id = v_app_id
                      AND ev.event_type = u.event_type AND ev.event_id = u.event_id) AS ref
            FROM unnest(v_types, v_ids) WITH ORDINALITY AS u (event_type, event_id, ord)
        ) k
        ORDER BY k.ord;
END $$;

-- begin_attempts_v4: begin_attempts_v3 (0097), and each permitted row says its line and its
-- event's ordering key; a head of a batching FIFO endpoint comes with the messages its batch
-- carries (rows whose batch_of names it). v3 stays granted for the previous release's senders
-- while this one is deployed (they send every head alone).
CREATE FUNCTION tidings.begin_attempts_v4(
    p_ids bigint[],
    p_tokens uuid[],
    p_attempts integer[],
    p_want_payload boolean[],
    p_lease_s double precision,
    p_hold_back_s double precision
) RETURNS TABLE (
    message_id bigint,
    endpoint_id bigint,
    permitted boolean,
    lease_token uuid,
    event_type text,
    event_id text,
    attempts integer,
    max_attempts integer,
    url text,
    timeout_ms integer,
    rate_limit_per_s double precision,
    max_in_flight integer,
    retry_schedule integer[],
    secret_data_keys bigint[],
    secrets bytea[],
    payload text,
    payload_format text,
    event_created_at timestamptz,
    credential_ids bigint[],
    credential_kinds text[],
    credential_data_keys bigint[],
    credentials bytea[],
    line_key text,
    line_seq bigint,
    ordering_key text,
    batch_of bigint,
    fifo_batch_size integer
)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH request AS (
        SELECT r.id, r.token, r.attempt, r.want_payload
        FROM unnest(p_ids, p_tokens, p_attempts, p_want_payload)
            AS r(id, token, attempt, want_payload)
    ),
    held AS (
        SELECT m.id, m.endpoint_id, r.token, r.attempt, r.want_payload,
               -- A rate-limited endpoint's requests spend the tokens the claim takes from its
               -- bucket: a retry that came back through the queue has none.
               m.status = 'failed' AND e.rate_limit_per_s IS NOT NULL AS without_token
        FROM tidings.messages m
        JOIN request r ON r.id = m.id AND m.lease_token = r.token AND m.attempts = r.attempt - 1
        JOIN tidings.endpoints e ON e.id = m.endpoint_id
        WHERE m.status IN ('in_flight', 'failed')
    ),
    probe AS (
        UPDATE tidings.endpoint_health h
        SET state = 'half_open', probe_token = c.token, probe_started_at = now()
        FROM (SELECT DISTINCT ON (held.endpoint_id) held.endpoint_id, held.token
              FROM held WHERE NOT held.without_token
              ORDER BY held.endpoint_id, held.id) c
        WHERE h.endpoint_id = c.endpoint_id
          AND tidings.probe_may_start(h.state, h.opened_at, h.cooldown_s, h.probe_started_at,
                                      p_lease_s)
        RETURNING h.endpoint_id, h.probe_token
    ),
    verdict AS (
        SELECT held.id, held.endpoint_id, held.token, held.attempt, held.want_payload,
               coalesce(e.enabled AND e.deleted_at IS NULL
                        AND (h.state = 'closed'
                             OR (h.state = 'half_open' AND h.probe_token = held.token)
                             OR p.probe_token = held.token)
                        AND NOT held.without_token,
                        false) AS permitted,
               CASE WHEN h.state = 'open'
                    THEN h.opened_at + h.cooldown_s * interval '1 second' END AS cooldown_ends_at
        FROM held
        JOIN tidings.endpoints e ON e.id = held.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = held.endpoint_id
        LEFT JOIN probe p ON p.endpoint_id = held.endpoint_id
    ),
    -- The messages a permitted head of a batching FIFO endpoint carries: the next waiting
    -- ones of its line, up to the batch size, and on a retry only those of its first attempt
    -- (line_batch_through), so every attempt of a batch sends the same messages.
    members AS (
        SELECT v.id AS head_id, w.id, w.line_seq
        FROM verdict v
        JOIN tidings.messages hm ON hm.id = v.id
        JOIN tidings.endpoints e ON e.id = v.endpoint_id
        CROSS JOIN LATERAL (
            SELECT w.id, w.line_seq
            FROM tidings.messages w
            WHERE w.endpoint_id = hm.endpoint_id AND w.line_key = hm.line_key
              AND w.status = 'waiting' AND w.line_seq > hm.line_seq
              AND (hm.line_batch_through IS NULL OR w.line_seq <= hm.line_batch_through)
            ORDER BY w.line_seq
            LIMIT e.fifo_batch_size - 1
        ) w
        WHERE v.permitted AND hm.line_key IS NOT NULL
          AND e.ordering = 'fifo' AND e.fifo_batch_size > 1
    ),
    started AS (
        UPDATE tidings.messages m
        SET status = 'in_flight',
            lease_token = gen_random_uuid(),
            next_attempt_at = greatest(m.next_attempt_at,
                                       now() + p_lease_s * interval '1 second'),
            line_batch_through = CASE
                WHEN m.line_batch_through IS NULL AND m.line_key IS NOT NULL
                     AND e.ordering = 'fifo' AND e.fifo_batch_size > 1
                    THEN coalesce((SELECT max(mb.line_seq) FROM members mb WHERE mb.head_id = m.id),
                                  m.line_seq)
                ELSE m.line_batch_through END
        FROM verdict v
        JOIN tidings.endpoints e ON e.id = v.endpoint_id
        WHERE m.id = v.id AND v.permitted
          AND m.lease_token = v.token AND m.attempts = v.attempt - 1
        RETURNING m.id, m.lease_token
    ),
    held_back AS (
        UPDATE tidings.messages m
        SET status = tidings.unleased_status(m.attempts),
            lease_token = NULL,
            next_attempt_at = greatest(v.cooldown_ends_at,
                                       now() + p_hold_back_s * interval '1 second')
        FROM verdict v
        WHERE m.id = v.id AND NOT v.permitted
          AND m.lease_token = v.token AND m.attempts = v.attempt - 1
        RETURNING m.id
    )
    SELECT v.id, v.endpoint_id, s.id IS NOT NULL, s.lease_token,
           m.event_type, ev.event_id, m.attempts,
           coalesce(m.max_attempts, e.max_attempts),
           e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight, e.retry_schedule,
           sk.data_keys,
           sk.ciphertexts,
           CASE WHEN v.want_payload THEN ev.payload::text END,
           e.payload_format, ev.created_at,
           cr.ids, cr.kinds, cr.data_keys, cr.ciphertexts,
           m.line_key, m.line_seq, ev.ordering_key, NULL::bigint, e.fifo_batch_size
    FROM verdict v
    JOIN tidings.messages m ON m.id = v.id
    JOIN tidings.endpoints e ON e.id = v.endpoint_id
    JOIN tidings.events ev ON ev.id = m.event_ref
    LEFT JOIN started s ON s.id = v.id
    -- The permitted rows' signing secrets, newest first: the current one and those still in
    -- their overlap, encrypted (tidings.endpoint_secrets, migration 0070; the sender decrypts).
    LEFT JOIN LATERAL (
        SELECT array_agg(es.data_key_id ORDER BY es.id DESC) AS data_keys,
               array_agg(es.ciphertext ORDER BY es.id DESC) AS ciphertexts
        FROM tidings.endpoint_secrets es
        WHERE s.id IS NOT NULL
          AND es.endpoint_id = v.endpoint_id
          AND (es.expires_at IS NULL OR es.expires_at > now())
    ) sk ON true
    -- The permitted rows' receiver credentials, encrypted (tidings.endpoint_credentials): NULL
    -- arrays for an endpoint without any, which is all the sender then does about them.
    LEFT JOIN LATERAL (
        SELECT array_agg(ec.id ORDER BY ec.id) AS ids,
               array_agg(ec.kind ORDER BY ec.id) AS kinds,
               array_agg(ec.data_key_id ORDER BY ec.id) AS data_keys,
               array_agg(ec.ciphertext ORDER BY ec.id) AS ciphertexts
        FROM tidings.endpoint_credentials ec
        WHERE s.id IS NOT NULL
          AND ec.endpoint_id = v.endpoint_id
    ) cr ON true
    WHERE s.id IS NOT NULL OR v.id IN (SELECT hb.id FROM held_back hb)
    UNION ALL
    -- The started heads' batch members: sent with their head, under its lease.
    SELECT w.id, w.endpoint_id, true, NULL::uuid, w.event_type, ev.event_id, w.attempts,
           NULL::integer, e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight,
           e.retry_schedule, NULL::bigint[], NULL::bytea[], ev.payload::text, e.payload_format,
           ev.created_at, NULL::bigint[], NULL::text[], NULL::bigint[], NULL::bytea[],
           w.line_key, w.line_seq, ev.ordering_key, mb.head_id, e.fifo_batch_size
    FROM members mb
    JOIN started s ON s.id = mb.head_id
    JOIN tidings.messages w ON w.id = mb.id
    JOIN tidings.endpoints e ON e.id = w.endpoint_id
    JOIN tidings.events ev ON ev.id = w.event_ref
    ORDER BY 1;
END $$;

-- record_outcomes_v1 (0120) replaced in place (same arguments): a batch's messages share its
-- head's outcome (outcome.members), and a settled FIFO head notes that its line may move on.
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
                 error_class text, excerpt text, members bigint[])
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
        RETURNING m.id, m.status, m.attempts, m.endpoint_id, m.event_type, m.dead_lettered_at,
                  m.line_key, m.line_seq, m.line_batch_through
    ),
    -- The messages a FIFO head's batch carried (begin_attempts_v4) share its outcome: delivered
    -- or dead-lettered with it, or waiting with it for its retry. Guarded by the head's write
    -- (its lease and attempt) and by each member still waiting behind it in its line.
    batch_written AS (
        UPDATE tidings.messages m
        SET status = CASE WHEN h.status IN ('delivered', 'dead_letter') THEN h.status
                          ELSE 'waiting' END,
            attempts = m.attempts + 1,
            delivered_at = CASE WHEN h.status = 'delivered' THEN now() END,
            dead_lettered_at = CASE WHEN h.status = 'dead_letter' THEN now() END,
            dead_letter_reported_at = NULL,
            last_error = o.error_class,
            last_status_code = o.status_code,
            last_response_ms = o.response_ms
        FROM written h
        JOIN outcome o ON o.id = h.id
        CROSS JOIN LATERAL unnest(o.members) AS carried (id)
        WHERE o.members IS NOT NULL
          AND m.id = carried.id
          AND m.status = 'waiting'
          AND m.endpoint_id = h.endpoint_id AND m.line_key = h.line_key
          AND m.line_seq > h.line_seq AND m.line_seq <= h.line_batch_through
        RETURNING m.id, m.status, m.attempts, m.endpoint_id, m.event_type, m.dead_lettered_at,
                  h.id AS head_id
    ),
    batch_logged AS (
        INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,
                                      status_code, response_ms, error_class, response_excerpt)
        SELECT b.id, b.endpoint_id, b.attempts, o.attempted_at,
               o.status_code, o.response_ms, o.error_class, o.excerpt
        FROM batch_written b
        JOIN outcome o ON o.id = b.head_id
        ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
    ),
    -- A FIFO head settled: its line may move on, which the sender asks for next
    -- (tidings.advance_lines_v1) and the claimer does should the sender not.
    line_noted AS (
        INSERT INTO tidings.fifo_line_moves (endpoint_id, ordering_key)
        SELECT DISTINCT w.endpoint_id, w.line_key
        FROM written w
        WHERE w.line_key IS NOT NULL AND w.status IN ('delivered', 'dead_letter')
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
    message_change AS MATERIALIZED (
        -- Messages dead-lettered, and those failing for the Nth time that will be retried (a
        -- batch's messages with their head, whose attempt they shared).
        SELECT w.id, w.endpoint_id, w.event_type, w.attempts, w.dead_lettered_at,
               CASE WHEN w.status = 'dead_letter' THEN 'message.attempt.exhausted'
                    ELSE 'message.attempt.failing' END AS event_type_out,
               w.head_id
        FROM (SELECT w.id, w.status, w.attempts, w.endpoint_id, w.event_type, w.dead_lettered_at,
                     w.id AS head_id
              FROM written w
              UNION ALL
              SELECT b.id, b.status, b.attempts, b.endpoint_id, b.event_type, b.dead_lettered_at,
                     b.head_id
              FROM batch_written b) w
        WHERE w.status = 'dead_letter'
           OR (w.status IN ('failed', 'waiting')
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
        JOIN outcome o ON o.id = mc.head_id
        -- Looked up per changed message (OFFSET 0 keeps the planner from turning the look-up
        -- into a join that reads the table first), so a batch that changes none reads no
        -- endpoint.
        CROSS JOIN LATERAL (SELECT e.id, e.app_id, e.url FROM tidings.endpoints e
                            WHERE e.id = mc.endpoint_id OFFSET 0) e
        CROSS JOIN LATERAL (SELECT a.uid FROM tidings.applications a
                            WHERE a.id = e.app_id OFFSET 0) a
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

-- advance_lines_v1: moves lines on. Each given line (endpoint and ordering key) whose head is
-- settled (delivered, dead-lettered, gone) or that has none makes its first waiting message its
-- head: 'pending', due now, for the claim; or, given p_lease_s, leased at once and returned for
-- the caller to queue, where its endpoint takes deliveries without the claim's count (no rate
-- limit, no cap of its own, a closed circuit, answered before and in the fast lane). A head
-- dead-lettered on an endpoint whose fifo_on_dead_letter is 'pause' pauses its line instead;
-- p_resume moves paused lines on past their dead letter. Lines locked by another advancer are
-- skipped unless p_wait (their notes stay for the claimer); the notes of the lines it holds are
-- deleted, and the decision is taken by a statement that starts after the lock, so that it sees
-- every waiting message whose note was deleted.
CREATE FUNCTION tidings.advance_lines_v1(
    p_endpoint_ids bigint[], p_keys text[], p_lease_s double precision, p_resume boolean,
    p_wait boolean
) RETURNS TABLE (message_id bigint, endpoint_id bigint, attempts integer, lease_token uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    -- Lines are made by their first advancer (a producer never writes one).
    INSERT INTO tidings.fifo_lines (endpoint_id, ordering_key)
    SELECT DISTINCT l.endpoint_id, l.ordering_key
    FROM unnest(p_endpoint_ids, p_keys) AS l (endpoint_id, ordering_key)
    JOIN tidings.endpoints e ON e.id = l.endpoint_id
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING;

    IF p_wait THEN
        SELECT array_agg(f.endpoint_id), array_agg(f.ordering_key)
        INTO v_endpoints, v_keys
        FROM (SELECT f.endpoint_id, f.ordering_key
              FROM tidings.fifo_lines f
              JOIN unnest(p_endpoint_ids, p_keys) AS l (endpoint_id, ordering_key)
                  ON l.endpoint_id = f.endpoint_id AND l.ordering_key = f.ordering_key
              ORDER BY f.endpoint_id, f.ordering_key
              FOR UPDATE OF f) f;
    ELSE
        SELECT array_agg(f.endpoint_id), array_agg(f.ordering_key)
        INTO v_endpoints, v_keys
        FROM (SELECT f.endpoint_id, f.ordering_key
              FROM tidings.fifo_lines f
              JOIN unnest(p_endpoint_ids, p_keys) AS l (endpoint_id, ordering_key)
                  ON l.endpoint_id = f.endpoint_id AND l.ordering_key = f.ordering_key
              ORDER BY f.endpoint_id, f.ordering_key
              FOR UPDATE OF f SKIP LOCKED) f;
    END IF;
    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;

    DELETE FROM tidings.fifo_line_moves mv
    USING unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
    WHERE mv.endpoint_id = l.endpoint_id AND mv.ordering_key = l.ordering_key;

    RETURN QUERY
    WITH line AS (
        SELECT f.endpoint_id, f.ordering_key, f.head_seq, f.paused_at, h.status AS head_status,
               e.ordering, e.fifo_on_dead_letter
        FROM unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
        JOIN tidings.fifo_lines f
            ON f.endpoint_id = l.endpoint_id AND f.ordering_key = l.ordering_key
        JOIN tidings.endpoints e ON e.id = f.endpoint_id
        LEFT JOIN tidings.messages h
            ON h.endpoint_id = f.endpoint_id AND h.line_key = f.ordering_key
           AND h.line_seq = f.head_seq
    ),
    decided AS (
        SELECT ln.endpoint_id, ln.ordering_key,
               CASE
                   WHEN ln.head_status IN ('pending', 'failed', 'in_flight') THEN 'stay'
                   WHEN ln.paused_at IS NOT NULL THEN CASE WHEN p_resume THEN 'move' ELSE 'stay' END
                   WHEN ln.head_status = 'dead_letter' AND ln.ordering = 'fifo'
                        AND ln.fifo_on_dead_letter = 'pause' AND NOT p_resume THEN 'pause'
                   ELSE 'move'
               END AS action
        FROM line ln
    ),
    next_head AS (
        SELECT d.endpoint_id, d.ordering_key, d.action,
               CASE WHEN d.action = 'move' THEN
                   (SELECT w.line_seq FROM tidings.messages w
                    WHERE w.endpoint_id = d.endpoint_id AND w.line_key = d.ordering_key
                      AND w.status = 'waiting'
                    ORDER BY w.line_seq
                    LIMIT 1) END AS seq
        FROM decided d
        WHERE d.action IN ('move', 'pause')
    ),
    -- (A line that stays as it is, idle with nothing waiting, is not written.)
    moved AS (
        UPDATE tidings.fifo_lines f
        SET head_seq = CASE WHEN n.action = 'move' THEN n.seq ELSE f.head_seq END,
            paused_at = CASE WHEN n.action = 'pause' THEN now() END
        FROM next_head n
        WHERE f.endpoint_id = n.endpoint_id AND f.ordering_key = n.ordering_key
          AND (n.action = 'pause' OR f.paused_at IS NOT NULL
               OR f.head_seq IS DISTINCT FROM n.seq)
    ),
    promoted AS (
        UPDATE tidings.messages m
        SET status = CASE WHEN q.fast THEN 'in_flight' ELSE 'pending' END::tidings.message_status,
            lease_token = CASE WHEN q.fast THEN gen_random_uuid() END,
            next_attempt_at = CASE WHEN q.fast THEN now() + p_lease_s * interval '1 second'
                                   ELSE now() END
        FROM next_head mv
        JOIN tidings.endpoints e ON e.id = mv.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = mv.endpoint_id
        CROSS JOIN LATERAL (
            SELECT p_lease_s IS NOT NULL AND e.enabled AND e.deleted_at IS NULL
                   AND e.rate_limit_per_s IS NULL AND e.max_in_flight IS NULL
                   AND h.state = 'closed' AND NOT coalesce(h.slow_until > now(), false)
                   AND (h.last_success_at IS NOT NULL OR h.last_failure_at IS NOT NULL) AS fast
        ) q
        WHERE mv.action = 'move'
          AND m.endpoint_id = mv.endpoint_id AND m.line_key = mv.ordering_key
          AND m.line_seq = mv.seq AND m.status = 'waiting'
        RETURNING m.id, m.endpoint_id, m.attempts, m.lease_token, q.fast
    )
    SELECT p.id, p.endpoint_id, p.attempts, p.lease_token FROM promoted p WHERE p.fast
    ORDER BY p.id;
END $$;

-- advance_noted_lines_v1: the claimer moves on the lines of up to p_limit notes (a producer's
-- new waiting messages, and the heads a sender settled without moving their line on); their
-- heads are then due for the claim that follows. Returns how many lines it looked at.
CREATE FUNCTION tidings.advance_noted_lines_v1(p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    SELECT array_agg(d.endpoint_id), array_agg(d.ordering_key)
    INTO v_endpoints, v_keys
    FROM (SELECT DISTINCT n.endpoint_id, n.ordering_key
          FROM (SELECT mv.endpoint_id, mv.ordering_key
                FROM tidings.fifo_line_moves mv
                ORDER BY mv.id
                LIMIT p_limit) n) d;
    IF v_endpoints IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM 1 FROM tidings.advance_lines_v1(v_endpoints, v_keys, NULL, false, false);
    RETURN cardinality(v_endpoints);
END $$;

-- place_in_lines_v1: the given messages, made pending again by a replay, a resend or a
-- recovery, join the lines of their FIFO endpoints: at the end of their line, in their original
-- order (their former places, then their ids); but the dead letters that paused a line (its
-- head and the messages its batch carried) go back to their own places, and their line goes on
-- from them. Messages of other endpoints are left as they are. Returns the ids placed, with the
-- status each now has.
CREATE FUNCTION tidings.place_in_lines_v1(p_message_ids bigint[])
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_endpoints bigint[];
    v_keys      text[];
    v_placed    bigint[];
BEGIN
    SELECT array_agg(l.endpoint_id ORDER BY l.endpoint_id, l.ordering_key),
           array_agg(l.ordering_key ORDER BY l.endpoint_id, l.ordering_key)
    INTO v_endpoints, v_keys
    FROM (SELECT DISTINCT m.endpoint_id, coalesce(ev.ordering_key, '') AS ordering_key
          FROM tidings.messages m
          JOIN tidings.endpoints e ON e.id = m.endpoint_id
          JOIN tidings.events ev ON ev.id = m.event_ref
          WHERE m.id = ANY (p_message_ids) AND m.status = 'pending' AND e.ordering = 'fifo') l;
    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;

    -- The lines, made where new, and held (waiting for any advancer) until the commit.
    INSERT INTO tidings.fifo_lines (endpoint_id, ordering_key)
    SELECT * FROM unnest(v_endpoints, v_keys)
    ON CONFLICT DO NOTHING;
    PERFORM 1
    FROM tidings.fifo_lines f
    JOIN unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
        ON l.endpoint_id = f.endpoint_id AND l.ordering_key = f.ordering_key
    ORDER BY f.endpoint_id, f.ordering_key
    FOR UPDATE OF f;

    WITH line AS (
        SELECT f.endpoint_id, f.ordering_key, f.head_seq, f.paused_at,
               h.status AS head_status,
               coalesce(h.line_batch_through, h.line_seq) AS paused_through
        FROM unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
        JOIN tidings.fifo_lines f
            ON f.endpoint_id = l.endpoint_id AND f.ordering_key = l.ordering_key
        LEFT JOIN tidings.messages h
            ON h.endpoint_id = f.endpoint_id AND h.line_key = f.ordering_key
           AND h.line_seq = f.head_seq
    ),
    target AS (
        SELECT m.id, m.line_seq AS old_seq, ln.endpoint_id, ln.ordering_key, ln.head_seq,
               -- The line's head (and what its batch carries) keeps its place: a dead letter
               -- that paused the line, or a retrying head recovered.
               coalesce(m.line_key = ln.ordering_key
                        AND m.line_seq BETWEEN ln.head_seq AND ln.paused_through, false)
                   AS in_place
        FROM tidings.messages m
        JOIN tidings.events ev ON ev.id = m.event_ref
        JOIN line ln ON ln.endpoint_id = m.endpoint_id
                    AND ln.ordering_key = coalesce(ev.ordering_key, '')
        WHERE m.id = ANY (p_message_ids) AND m.status = 'pending'
    ),
    at_end AS (
        SELECT t.id, row_number() OVER (ORDER BY t.old_seq NULLS LAST, t.id) AS rank
        FROM target t
        WHERE NOT t.in_place
    ),
    placed AS (
        UPDATE tidings.messages m
        SET line_key = t.ordering_key,
            line_seq = coalesce(p.seq, m.line_seq),
            line_batch_through = CASE WHEN t.in_place THEN m.line_batch_through END,
            status = CASE WHEN t.in_place AND m.line_seq = t.head_seq THEN 'pending'
                          ELSE 'waiting' END::tidings.message_status
        FROM target t
        LEFT JOIN at_end a ON a.id = t.id
        LEFT JOIN tidings.allocate_line_positions((SELECT count(*) FROM at_end)) p
            ON p.rank = a.rank
        WHERE m.id = t.id
        RETURNING m.id, m.status
    ),
    -- A line goes on from a dead letter of its own put back; one whose head is settled and that
    -- is not paused has nothing on its way (its head is chosen below).
    relined AS (
        UPDATE tidings.fifo_lines f
        SET paused_at = CASE WHEN ln.paused_at IS NOT NULL
                                  AND EXISTS (SELECT 1 FROM target t
                                              WHERE t.in_place AND t.endpoint_id = f.endpoint_id
                                                AND t.ordering_key = f.ordering_key
                                                AND t.old_seq = f.head_seq)
                             THEN NULL ELSE f.paused_at END,
            head_seq = CASE WHEN ln.paused_at IS NULL
                                 AND coalesce(ln.head_status NOT IN ('pending', 'failed',
                                                                     'in_flight'), true)
                            THEN NULL ELSE f.head_seq END
        FROM line ln
        WHERE f.endpoint_id = ln.endpoint_id AND f.ordering_key = ln.ordering_key
    )
    SELECT array_agg(p.id) INTO v_placed FROM placed p;

    PERFORM 1 FROM tidings.advance_lines_v1(v_endpoints, v_keys, NULL, false, true);
    RETURN QUERY
    SELECT m.id, m.status::text FROM tidings.messages m WHERE m.id = ANY (v_placed) ORDER BY m.id;
END $$;

-- reorder_endpoint_v1: after an endpoint's ordering changed. To 'fifo': its messages not yet
-- attempted (pending, never tried) join their lines in the order of their ids, and the lines
-- start. To 'none': every waiting message is pending again, due now, and the endpoint's lines
-- are forgotten (a later switch back starts them afresh). Messages already attempted go on as
-- they were. Returns how many messages it moved.
CREATE FUNCTION tidings.reorder_endpoint_v1(p_endpoint_id bigint) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_ordering  text;
    v_count     integer;
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    SELECT e.ordering INTO v_ordering FROM tidings.endpoints e WHERE e.id = p_endpoint_id;
    PERFORM 1 FROM tidings.fifo_lines f WHERE f.endpoint_id = p_endpoint_id
    ORDER BY f.ordering_key FOR UPDATE;
    IF v_ordering IS DISTINCT FROM 'fifo' THEN
        -- Every unsettled message leaves its line (a head on its way too, so that it never
        -- heads a line again should the endpoint return to fifo); the waiting ones are due.
        UPDATE tidings.messages m
        SET status = CASE WHEN m.status = 'waiting' THEN 'pending' ELSE m.status END,
            next_attempt_at = CASE WHEN m.status = 'waiting' THEN now()
                                   ELSE m.next_attempt_at END,
            line_key = NULL, line_seq = NULL, line_batch_through = NULL
        WHERE m.endpoint_id = p_endpoint_id AND m.line_key IS NOT NULL
          AND m.status IN ('waiting', 'pending', 'failed', 'in_flight');
        GET DIAGNOSTICS v_count = ROW_COUNT;
        DELETE FROM tidings.fifo_lines f WHERE f.endpoint_id = p_endpoint_id;
        DELETE FROM tidings.fifo_line_moves mv WHERE mv.endpoint_id = p_endpoint_id;
        RETURN v_count;
    END IF;

    WITH target AS (
        SELECT m.id, coalesce(ev.ordering_key, '') AS ordering_key,
               row_number() OVER (ORDER BY m.id) AS rank
        FROM tidings.messages m
        JOIN tidings.events ev ON ev.id = m.event_ref
        WHERE m.endpoint_id = p_endpoint_id AND m.status = 'pending' AND m.attempts = 0
          AND m.line_key IS NULL
    ),
    joined AS (
        UPDATE tidings.messages m
        SET status = 'waiting', line_key = t.ordering_key, line_seq = p.seq
        FROM target t
        JOIN tidings.allocate_line_positions((SELECT count(*) FROM target)) p ON p.rank = t.rank
        WHERE m.id = t.id AND m.status = 'pending'
        RETURNING m.line_key
    )
    SELECT count(*)::integer, array_agg(DISTINCT j.line_key) INTO v_count, v_keys FROM joined j;
    IF v_count > 0 THEN
        SELECT array_agg(p_endpoint_id) INTO v_endpoints FROM unnest(v_keys);
        PERFORM 1 FROM tidings.advance_lines_v1(v_endpoints, v_keys, NULL, false, true);
    END IF;
    RETURN v_count;
END $$;

-- resume_lines_v1: paused lines of an endpoint go on past the dead letter that paused them: all
-- of them, or those of the given ordering keys ('' for the line of events without one). Returns
-- the keys of the lines resumed.
CREATE FUNCTION tidings.resume_lines_v1(p_endpoint_id bigint, p_keys text[]) RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    SELECT array_agg(f.endpoint_id ORDER BY f.ordering_key),
           array_agg(f.ordering_key ORDER BY f.ordering_key)
    INTO v_endpoints, v_keys
    FROM tidings.fifo_lines f
    WHERE f.endpoint_id = p_endpoint_id AND f.paused_at IS NOT NULL
      AND (p_keys IS NULL OR f.ordering_key = ANY (p_keys));
    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;
    PERFORM 1 FROM tidings.advance_lines_v1(v_endpoints, v_keys, NULL, true, true);
    RETURN QUERY
    SELECT f.ordering_key FROM tidings.fifo_lines f
    WHERE f.endpoint_id = p_endpoint_id AND f.ordering_key = ANY (v_keys) AND f.paused_at IS NULL
    ORDER BY f.ordering_key;
END $$;

ALTER FUNCTION tidings.begin_attempts_v4(bigint[], uuid[], integer[], boolean[],
                                         double precision, double precision)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

GRANT EXECUTE ON FUNCTION tidings.begin_attempts_v4(bigint[], uuid[], integer[], boolean[],
                                                     double precision, double precision),
                          tidings.advance_lines_v1(bigint[], text[], double precision, boolean,
                                                   boolean)
    TO tidings_sender;
GRANT EXECUTE ON FUNCTION tidings.advance_noted_lines_v1(integer) TO tidings_claimer;
GRANT EXECUTE ON FUNCTION tidings.place_in_lines_v1(bigint[]),
                          tidings.reorder_endpoint_v1(bigint),
                          tidings.resume_lines_v1(bigint, text[])
    TO tidings_ingest, tidings_operator;

-- The API and the operators set an endpoint's ordering and read the lines and places.
GRANT SELECT (ordering, fifo_batch_size, fifo_on_dead_letter),
      INSERT (ordering, fifo_batch_size, fifo_on_dead_letter),
      UPDATE (ordering, fifo_batch_size, fifo_on_dead_letter)
    ON tidings.endpoints TO tidings_ingest, tidings_operator;
GRANT SELECT (ordering_key) ON tidings.events TO tidings_ingest, tidings_operator;
GRANT SELECT (line_key, line_seq) ON tidings.messages TO tidings_ingest, tidings_operator;
GRANT SELECT (endpoint_id, ordering_key, head_seq, paused_at) ON tidings.fifo_lines
    TO tidings_ingest, tidings_operator;
