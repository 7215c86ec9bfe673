-- tidings.enqueue: the one call a producer makes, inside its own transaction (transactional
-- outbox): a rolled-back business write never sends a webhook.
--
-- Creates one message per enabled endpoint subscribed to event_type (or per enabled endpoint named
-- in endpoint_ids) and returns their ids. (event_type, event_id) is the idempotency key: the same
-- key again returns the ids created the first time and creates nothing, also when many sessions
-- send it at once (the unique index makes the later ones wait for the first, then see its rows).
--
-- Errors: SQLSTATE 22023 for a bad argument, 23503 for an endpoint id that does not exist.
CREATE FUNCTION tidings.enqueue(
    event_type    text,
    payload       jsonb,
    event_id      text DEFAULT NULL,
    endpoint_ids  bigint[] DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_event_id  text := coalesce(enqueue.event_id, gen_random_uuid()::text);
    v_event_ref bigint;
    v_unknown   bigint[];
BEGIN
    IF enqueue.event_type IS NULL OR enqueue.event_type = '' THEN
        RAISE EXCEPTION 'tidings.enqueue: event_type must be a non-empty string'
            USING ERRCODE = '22023';
    END IF;
    IF length(enqueue.event_type) > 200 THEN
        RAISE EXCEPTION 'tidings.enqueue: event_type is longer than 200 characters'
            USING ERRCODE = '22023';
    END IF;
    IF enqueue.payload IS NULL OR jsonb_typeof(enqueue.payload) = 'null' THEN
        RAISE EXCEPTION 'tidings.enqueue: payload must not be null'
            USING ERRCODE = '22023';
    END IF;
    IF v_event_id = '' OR length(v_event_id) > 200 THEN
        RAISE EXCEPTION 'tidings.enqueue: event_id must be 1 to 200 characters'
            USING ERRCODE = '22023';
    END IF;
    IF enqueue.endpoint_ids IS NOT NULL THEN
        SELECT array_agg(wanted ORDER BY wanted) INTO v_unknown
        FROM unnest(enqueue.endpoint_ids) AS wanted
        WHERE wanted IS NULL OR NOT EXISTS (
            SELECT 1 FROM tidings.endpoints e WHERE e.id = wanted AND e.deleted_at IS NULL);
        IF v_unknown IS NOT NULL THEN
            RAISE EXCEPTION 'tidings.enqueue: unknown endpoint ids: %', v_unknown
                USING ERRCODE = '23503';
        END IF;
    END IF;

    INSERT INTO tidings.events AS ev (event_type, event_id, payload)
    VALUES (enqueue.event_type, v_event_id, enqueue.payload)
    ON CONFLICT ON CONSTRAINT events_idempotency_key DO NOTHING
    RETURNING ev.id INTO v_event_ref;

    IF v_event_ref IS NULL THEN
        -- A duplicate: answer with what the first call created.
        RETURN QUERY
            SELECT m.id
            FROM tidings.events ev
            JOIN tidings.messages m ON m.event_ref = ev.id
            WHERE ev.event_type = enqueue.event_type AND ev.event_id = v_event_id
            ORDER BY m.id;
        RETURN;
    END IF;

    RETURN QUERY
        INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)
        SELECT v_event_ref, e.id, enqueue.event_type
        FROM tidings.endpoints e
        WHERE e.enabled
          AND e.deleted_at IS NULL
          AND CASE
                WHEN enqueue.endpoint_ids IS NOT NULL THEN e.id = ANY (enqueue.endpoint_ids)
                ELSE EXISTS (
                    SELECT 1 FROM tidings.subscriptions s
                    WHERE s.endpoint_id = e.id AND s.event_type IN (enqueue.event_type, '*'))
              END
        ORDER BY e.id
        RETURNING id;
END $$;
