-- Nobody but Tidings sends events to the operational application. Its endpoints belong to the
-- operator's own systems, which act on what they hear (email a customer whose endpoint was
-- disabled, open a ticket for a dead letter): an event a producer could put there would be a
-- forged report. The API and the CLI refuse such a call before it reaches the database; here
-- tidings.enqueue_batch refuses it too, so that tidings.enqueue, enqueue_event and enqueue_batch,
-- which producers' logins may execute, cannot do it either (SQLSTATE 42501,
-- insufficient_privilege, DETAIL 'application'). Tidings' own operational events go through
-- tidings.enqueue_into_v1 (0100, 0120), which no role may call.
--
-- enqueue_batch as in 0100_filters_and_channels.sql, with that refusal; replaced in place (same
-- arguments, so grants stay), its attributes stated again.
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
        IF application = (SELECT s.text_value FROM tidings.settings s
                          WHERE s.name = 'operational_application') THEN
            RAISE EXCEPTION 'tidings.enqueue: the operational application % takes events from '
                            'Tidings only', application
                USING ERRCODE = '42501', DETAIL = 'application';
        END IF;
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
