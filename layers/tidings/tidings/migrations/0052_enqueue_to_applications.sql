-- Events are sent to an application: the idempotency key becomes (application, event type,
-- event id), and tidings.enqueue / tidings.enqueue_batch take the application's uid as an
-- optional named argument (none: 'default', so every existing call keeps its meaning).

-- Locks: VALIDATE CONSTRAINT reads events under SHARE UPDATE EXCLUSIVE (reads and writes go on);
-- the constraint swap and the index drop change the catalog only, under ACCESS EXCLUSIVE on
-- events and subscriptions, held from there to the commit of this migration (replacing the
-- functions below is quick).
ALTER TABLE tidings.events VALIDATE CONSTRAINT events_app_id_fkey;
-- The index 0051 built becomes the key, under the old name, so that ON CONFLICT ON CONSTRAINT
-- events_idempotency_key keeps naming the idempotency key.
ALTER TABLE tidings.events
    DROP CONSTRAINT events_idempotency_key,
    ADD CONSTRAINT events_idempotency_key UNIQUE USING INDEX events_app_key;
-- Fan-out now reads subscriptions_by_app_and_type (0050).
DROP INDEX tidings.subscriptions_by_event_type;

-- The functions gain a parameter, so they are made again rather than replaced: two versions side
-- by side would make every call that leaves the new parameter out ambiguous. Calls by position or
-- by name with the arguments of before keep working. (Privileges granted on them, if any, must be
-- granted again.)
DROP FUNCTION tidings.enqueue(text, jsonb, text, bigint[]);
DROP FUNCTION tidings.enqueue_event(text, jsonb, text, bigint[]);
DROP FUNCTION tidings.enqueue_batch(jsonb);

-- tidings.enqueue_batch: many events for one application in one call; tidings.enqueue and
-- tidings.enqueue_event are thin wrappers around it, so the SQL path and the HTTP API cannot drift.
--
-- events is a JSON array of {"event_type", "payload", "event_id"?, "endpoint_ids"?}; application
-- is the uid of the application they are sent to (NULL: 'default'). Returns one row per input
-- element, in input order: its position (0-based), the event's id, whether this call created it
-- (false for a repeated (application, event_type, event_id), also when the key repeats inside the
-- batch), and the ids of the event's messages (the original ones for a duplicate). An event fans
-- out to the enabled endpoints of its application subscribed to its type ('*' for every type), or
-- to the endpoints named in endpoint_ids, which must belong to that application.
--
-- Events are inserted sorted by (event_type, event_id), so overlapping batches take the unique
-- index's locks in one order and cannot deadlock; a concurrent duplicate waits for the first
-- writer and then sees its rows (each statement below takes a fresh snapshot).
--
-- Sending to a named application holds, until the caller's transaction ends, the application's
-- deletion lock in shared mode (an advisory lock: class 1953064041, 'tidi', and the id modulo
-- 2^31) and its row FOR KEY SHARE. Deleting it takes the deletion lock exclusively: it waits for
-- the events being sent to it and then dead-letters their messages too, and an event sent once it
-- is deleted finds no application. Concurrent senders do not wait for each other (both locks are
-- shared). The advisory lock is what makes the deletion wait its turn: PostgreSQL grants a shared
-- row lock to a newcomer even while a FOR UPDATE waits, so under steady traffic a deletion could
-- wait for ever; the lock manager queues a shared advisory request behind a waiting exclusive one.
--
-- Errors: SQLSTATE 22023 for a bad argument; 23503 for an unknown (or deleted) application,
-- DETAIL "application", and for an endpoint id that does not exist in the application, DETAIL
-- naming the field (for example "events[3].endpoint_ids"). Nothing is created then.
CREATE FUNCTION tidings.enqueue_batch(events jsonb, application text DEFAULT NULL)
RETURNS TABLE (item integer, event_ref bigint, created boolean, message_ids bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    v_app_id    bigint;
    v_types     text[];
    v_ids       text[];
    v_payloads  jsonb[];
    v_targets   jsonb[];
    v_count     integer;
    v_bad       record;
    v_created   bigint[];
    v_where     text;
BEGIN
    IF application IS NULL THEN
        -- 'default' can never be deleted (default_application_stays): no lock needed.
        v_app_id := 1;
    ELSE
        SELECT a.id INTO v_app_id FROM tidings.applications a WHERE a.uid = application;
        IF FOUND THEN
            PERFORM pg_advisory_xact_lock_shared(1953064041, mod(v_app_id, 2147483648)::integer);
            SELECT a.id INTO v_app_id
            FROM tidings.applications a
            WHERE a.id = v_app_id AND a.deleted_at IS NULL
            FOR KEY SHARE;
        END IF;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'tidings.enqueue: unknown application: %', application
                USING ERRCODE = '23503', DETAIL = 'application';
        END IF;
    END IF;

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
           array_agg(e -> 'endpoint_ids' ORDER BY ord)
    INTO v_types, v_ids, v_payloads, v_targets
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
           END AS problem
    INTO v_bad
    FROM unnest(v_types, v_ids, v_payloads, v_targets) WITH ORDINALITY
         AS u (event_type, event_id, payload, targets, ord)
    WHERE u.event_type IS NULL OR u.event_type = '' OR length(u.event_type) > 200
       OR u.payload IS NULL OR jsonb_typeof(u.payload) = 'null'
       OR u.event_id IS NULL OR u.event_id = '' OR length(u.event_id) > 200
       OR (u.targets IS NOT NULL AND jsonb_typeof(u.targets) NOT IN ('array', 'null'))
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %', format('%s%s', replace(v_where, '].', ']: '), CASE v_bad.problem
                WHEN 'event_type' THEN 'event_type must be a non-empty string'
                WHEN 'event_type_length' THEN 'event_type is longer than 200 characters'
                WHEN 'payload' THEN 'payload must not be null'
                WHEN 'event_id' THEN 'event_id must be 1 to 200 characters'
                ELSE 'endpoint_ids must be an array of endpoint ids'
            END)
            USING ERRCODE = '22023',
                  DETAIL = v_where || CASE WHEN v_bad.problem = 'event_type_length'
                                           THEN 'event_type' ELSE v_bad.problem END;
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

    -- New events in key order, then their fan-out in one statement.
    WITH firsts AS (
        SELECT DISTINCT ON (u.event_type, u.event_id) u.event_type, u.event_id, u.payload, u.targets
        FROM unnest(v_types, v_ids, v_payloads, v_targets) WITH ORDINALITY
             AS u (event_type, event_id, payload, targets, ord)
        ORDER BY u.event_type, u.event_id, u.ord
    ),
    inserted AS (
        INSERT INTO tidings.events AS ev (app_id, event_type, event_id, payload)
        SELECT v_app_id, f.event_type, f.event_id, f.payload FROM firsts f
        ORDER BY f.event_type, f.event_id
        ON CONFLICT ON CONSTRAINT events_idempotency_key DO NOTHING
        RETURNING ev.id, ev.event_type, ev.event_id
    ),
    -- Each new event's targets: the named endpoints, or else the subscribers of its type in its
    -- application (found through subscriptions_by_app_and_type, so the cost follows those
    -- subscribers, neither the application's other endpoints nor other applications').
    targets AS (
        SELECT i.id AS event_ref, i.event_type, t.endpoint_id
        FROM inserted i
        JOIN firsts f ON f.event_type = i.event_type AND f.event_id = i.event_id
        CROSS JOIN LATERAL (
            SELECT s.endpoint_id
            FROM tidings.subscriptions s
            WHERE jsonb_typeof(f.targets) IS DISTINCT FROM 'array'
              AND s.app_id = v_app_id
              AND s.event_type IN (i.event_type, '*')
            UNION
            SELECT named.value::bigint
            FROM jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(f.targets) = 'array' THEN f.targets ELSE '[]' END) AS named
        ) t
    ),
    fanned AS (
        INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)
        SELECT t.event_ref, e.id, t.event_type
        FROM targets t
        JOIN tidings.endpoints e ON e.id = t.endpoint_id
        WHERE e.enabled AND e.deleted_at IS NULL AND e.app_id = v_app_id
        ORDER BY t.event_ref, e.id
        RETURNING 1
    )
    -- (fanned runs to completion although nothing reads it: PostgreSQL always does that.)
    SELECT array_agg(i.id) INTO v_created FROM inserted i;

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

-- One event: the created flag tells a new event from a repeated key (the API answers 202 or 200).
CREATE FUNCTION tidings.enqueue_event(
    event_type    text,
    payload       jsonb,
    event_id      text DEFAULT NULL,
    endpoint_ids  bigint[] DEFAULT NULL,
    application   text DEFAULT NULL,
    OUT event_ref bigint,
    OUT created boolean,
    OUT message_ids bigint[]
)
LANGUAGE sql AS $$
    SELECT b.event_ref, b.created, b.message_ids
    FROM tidings.enqueue_batch(jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
        'event_type', enqueue_event.event_type,
        'event_id', enqueue_event.event_id,
        'endpoint_ids', to_jsonb(enqueue_event.endpoint_ids))) || jsonb_build_object(
        'payload', enqueue_event.payload)), enqueue_event.application) AS b
$$;

-- tidings.enqueue: the one call a producer makes, inside its own transaction (transactional
-- outbox): a rolled-back business write never sends a webhook. Returns the message ids;
-- (application, event_type, event_id) is the idempotency key: the same key again returns the ids
-- created the first time and creates nothing. For example
--   SELECT * FROM tidings.enqueue('order.created', '{"id": 42}', 'order-42', application => 'acme');
CREATE FUNCTION tidings.enqueue(
    event_type    text,
    payload       jsonb,
    event_id      text DEFAULT NULL,
    endpoint_ids  bigint[] DEFAULT NULL,
    application   text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE sql AS $$
    SELECT unnest(e.message_ids)
    FROM tidings.enqueue_event(enqueue.event_type, enqueue.payload, enqueue.event_id,
                               enqueue.endpoint_ids, enqueue.application) AS e
$$;
