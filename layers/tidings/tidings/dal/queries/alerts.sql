-- name: monitor_checkpoint
-- When the health monitor last completed a run (NULL before its first).
SELECT rolled_to FROM tidings.job_state WHERE job = 'health_monitor';

-- name: save_monitor_checkpoint
-- Records that the health monitor completed a run at checked_at (never moving it backwards).
INSERT INTO tidings.job_state AS s (job, rolled_to) VALUES ('health_monitor', %(checked_at)s)
ON CONFLICT (job) DO UPDATE
SET rolled_to = greatest(s.rolled_to, excluded.rolled_to), updated_at = now();

-- name: firing_alerts
-- The alerts currently firing.
SELECT alert_key, kind, first_fired_at, details
FROM tidings.alerts
WHERE firing
ORDER BY alert_key;

-- name: claim_alert_firing
-- Marks an alert as firing, only if it was not firing already (so that of overlapping monitor
-- runs exactly one sends it), and in the same statement puts its notification in the outbox,
-- held by this run for claim_s; returns the outbox entry's id (nothing when not claimed).
WITH claimed AS (
    INSERT INTO tidings.alerts AS a (alert_key, kind, firing, first_fired_at, last_notified_at,
                                     resolved_at, details)
    VALUES (%(alert_key)s, %(kind)s, true, %(now)s, %(now)s, NULL, %(details)s)
    ON CONFLICT (alert_key) DO UPDATE
    SET kind = excluded.kind,
        firing = true,
        first_fired_at = excluded.first_fired_at,
        last_notified_at = excluded.last_notified_at,
        resolved_at = NULL,
        details = excluded.details
    WHERE NOT a.firing
    RETURNING a.alert_key
)
INSERT INTO tidings.alert_outbox (alert_key, subject, body, attributes, due_at)
SELECT c.alert_key, %(subject)s, %(body)s, %(attributes)s,
       %(now)s::timestamptz + %(claim_s)s * interval '1 second'
FROM claimed c
RETURNING id;

-- name: claim_alert_resolved
-- Marks a firing alert as resolved, only if it was firing (so that of overlapping monitor runs
-- exactly one sends the resolution), and in the same statement puts the resolution in the outbox,
-- held by this run for claim_s; returns the outbox entry's id (nothing when not claimed).
WITH claimed AS (
    UPDATE tidings.alerts
    SET firing = false, resolved_at = %(now)s, last_notified_at = %(now)s
    WHERE alert_key = %(alert_key)s AND firing
    RETURNING alert_key
)
INSERT INTO tidings.alert_outbox (alert_key, subject, body, attributes, due_at)
SELECT c.alert_key, %(subject)s, %(body)s, %(attributes)s,
       %(now)s::timestamptz + %(claim_s)s * interval '1 second'
FROM claimed c
RETURNING id;

-- name: take_waiting_notifications
-- Takes up to max_rows notifications an earlier run left unpublished (it failed, or died before
-- publishing), oldest first, holding each for claim_s so that an overlapping run skips it.
UPDATE tidings.alert_outbox o
SET due_at = %(now)s::timestamptz + %(claim_s)s * interval '1 second', tries = o.tries + 1
WHERE o.id IN (SELECT w.id FROM tidings.alert_outbox w
               WHERE w.due_at <= %(now)s
               ORDER BY w.id
               LIMIT %(max_rows)s
               FOR UPDATE SKIP LOCKED)
RETURNING o.id, o.alert_key, o.subject, o.body, o.attributes, o.tries;

-- name: notification_published
-- A notification went out: it leaves the outbox.
DELETE FROM tidings.alert_outbox WHERE id = %(outbox_id)s;

-- name: notification_not_published
-- A notification could not be published: due again at once, for the next run.
UPDATE tidings.alert_outbox SET due_at = %(now)s WHERE id = %(outbox_id)s;
