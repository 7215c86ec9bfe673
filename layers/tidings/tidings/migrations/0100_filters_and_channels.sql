-- Content filters and channels, evaluated where events fan out: inside tidings.enqueue_batch, so
-- that an event sent over SQL in the producer's own transaction is routed exactly like one sent
-- over HTTP.
--
-- An endpoint may have a filter: the JSON document its writer gave (filter), checked and
-- compiled once on write by tidings.logic.filters to a jsonpath predicate (filter_path). The
-- fan-out keeps a subscriber whose filter_path matches the payload, with the event's type as
-- the jsonpath variable $"event_type". The compiled predicate is made of exists(...) tests,
-- which are never unknown, and the call is silent, so a payload the filter cannot read (a
-- number where it compares a string) is simply not matched.
--
-- Channels: an event may carry up to 10 channel names ("channels" in an element of the events
-- array; stored on the event, NULL when none); an endpoint may subscribe to up to 10. A
-- subscriber with channels receives an event only when the two share one; one without
-- channels receives the events of its types whatever their channels. A channel name has the
-- syntax of an application's uid, so every uid is one.
--
-- Endpoints named in endpoint_ids receive the event as before: naming them bypasses their
-- subscriptions, and so their filters and channels too.
--
-- Locks: new nullable columns without defaults on endpoints and events (catalog only, ACCESS
-- EXCLUSIVE for that moment); the endpoints' new checks read that table (small) once.

ALTER TABLE tidings.endpoints
    ADD COLUMN filter jsonb,
    ADD COLUMN filter_path jsonpath,
    ADD COLUMN channels text[],
    ADD CONSTRAINT endpoints_filter_compiled CHECK ((filter IS NULL) = (filter_path IS NULL)),
    -- 1 to 10 names (none is NULL), each with the syntax of an application's uid; names hold
    -- no comma, so joined by commas they match the pattern below only if each one does.
    ADD CONSTRAINT endpoints_channels_valid CHECK (
        cardinality(channels) BETWEEN 1 AND 10
        AND array_position(channels, NULL) IS NULL
        AND array_to_string(channels, ',')
            ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}(,[A-Za-z0-9][A-Za-z0-9._:-]{0,199})*$');

ALTER TABLE tidings.events ADD COLUMN channels text[];

GRANT SELECT (filter, filter_path, channels), INSERT (filter, filter_path, channels),
      UPDATE (filter, filter_path, channels)
    ON tidings.endpoints TO tidings_ingest, tidings_operator;
GRANT SELECT (channels) ON tidings.events TO tidings_ingest, tidings_operator;

-- enqueue_batch as in 0091_payload_limit_in_sql.sql, with channels and filters, in two parts:
-- tidings.enqueue_batch (granted to producers, the ingest function and operators) finds the
-- application and holds it; tidings.enqueue_into_v1, granted to nobody, checks the events and
-- writes them and their messages into the application it is given. Tidings' own events (the
-- operational events of 0120) go straight to the second, so that the first may refuse callers
-- what Tidings itself may do (0124). enqueue_batch is replaced in place (same arguments, so grants
-- stay), its attributes stated again (0071).
CREATE OR REPLACE FUNCTION tidings.enqueue_batch(events jsonb, application text DEFAULT NULL)
RETURNS TABLE (item integer, event_ref bigint, created boolean, message_ids bigint[])
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_app_id bigint;
BEGIN
    IF application IS NULL THEN
        -- 'default' can never be deleted (default_application_stays): no lock needed.
        v_app_id := 1;
    ELSE
        -- Read first, lock after, and no advisory lock: an application marked deleted is
        -- refused without taking its row lock.
        SELECT a.id INTO v_app_id
        FROM tidings.applications a
        WHERE a.uid = application AND a.deleted_at IS NULL;
        IF FOUND THEN
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
    RETURN QUERY SELECT * FROM tidings.enqueue_into_v1(events, v_app_id, application);
END $$;

-- enqueue_into_v1: the events of a batch, checked, and their fan-out, written into the
-- application p_app_id (which the caller has found live and holds FOR KEY SHARE, or which cannot
-- be deleted); application is its uid as the caller named it (NULL for 'default'), for errors.
-- Runs with its callers' rights, which are always the owner's: only SECURITY DEFINER functions
-- call it, and no role may.
CREATE FUNCTION tidings.enqueue_into_v1(events jsonb, p_app_id bigint, application text)
RETURNS TABLE (item integer, event_ref bigint, created boolean, message_ids bigint[])
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_app_id    bigint := p_app_id;
    v_types     text[];
    v_ids       text[];
    v_payloads  jsonb[];
    v_targets   jsonb[];
    v_channels  jsonb[];
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
           array_agg(e -> 'channels' ORDER BY ord)
    INTO v_types, v_ids, v_payloads, v_targets, v_channels
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
           END AS problem
    INTO v_bad
    FROM unnest(v_types, v_ids, v_payloads, v_targets, v_channels) WITH ORDINALITY
         AS u (event_type, event_id, payload, targets, channels, ord)
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
       OR c.bad
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
                    THEN ARRAY(SELECT jsonb_array_elements_text(u.channels)) END AS channels
        FROM unnest(v_types, v_ids, v_payloads, v_targets, v_channels) WITH ORDINALITY
             AS u (event_type, event_id, payload, targets, channels, ord)
        WHERE EXISTS (SELECT 1 FROM live)
        ORDER BY u.event_type, u.event_id, u.ord
    ),
    inserted AS (
        INSERT INTO tidings.events AS ev (app_id, event_type, event_id, payload, channels)
        SELECT v_app_id, f.event_type, f.event_id, f.payload, f.channels FROM firsts f
        ORDER BY f.event_type, f.event_id
        ON CONFLICT ON CONSTRAINT events_idempotency_key DO NOTHING
        RETURNING ev.id, ev.event_type, ev.event_id
    ),
    -- Each new event's targets: the named endpoints, or else the subscribers of its type in its
    -- application (found through subscriptions_by_app_and_type, so the cost follows those
    -- subscribers, neither the application's other endpoints nor other applications'). The two
    -- branches exclude each other, so "named" tells which one an endpoint came from.
    targets AS (
        SELECT i.id AS event_ref, i.event_type, f.payload, f.channels, t.endpoint_id, t.named
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
    fanned AS (
        INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)
        SELECT t.event_ref, e.id, t.event_type
        FROM targets t
        JOIN tidings.endpoints e ON e.id = t.endpoint_id
        WHERE e.enabled AND e.deleted_at IS NULL AND e.app_id = v_app_id
          AND (t.named
               OR ((e.channels IS NULL OR e.channels && t.channels)
                   AND (e.filter_path IS NULL
                        OR jsonb_path_match(t.payload, e.filter_path,
                                            jsonb_build_object('event_type', t.event_type),
                                            true))))
        ORDER BY t.event_ref, e.id
        RETURNING 1
    )
    -- (fanned runs to completion although nothing reads it: PostgreSQL always does that.)
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
