-- emit_lifecycle_v1 as in 0120_operational_events.sql, leaving out the events whose payload is
-- over the deployment's payload limit (TIDINGS_MAX_PAYLOAD_BYTES, the producers' limit, which
-- enqueue_batch holds every event to): an endpoint's URL, or the event types it subscribes to, can
-- make one longer than a deployment that sets the limit low allows, and enqueue_batch refusing it
-- would fail the change reported (a person's change, or every outcome of the sender's batch).
-- Each one left out is named in a warning. Measured as enqueue_batch measures (0091), so what
-- is handed on is never refused. Replaced in place (same arguments, so grants stay), its
-- attributes stated again.
CREATE OR REPLACE FUNCTION tidings.emit_lifecycle_v1(p_events jsonb) RETURNS integer
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
