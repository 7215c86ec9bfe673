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
-- Marks an alert as firing and returns its key only if it was not firing already, so that of
-- overlapping monitor runs exactly one sends it.
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
RETURNING a.alert_key;

-- name: claim_alert_resolved
-- Marks a firing alert as resolved and returns its key only if it was firing, so that of
-- overlapping monitor runs exactly one sends the resolution.
UPDATE tidings.alerts
SET firing = false, resolved_at = %(now)s, last_notified_at = %(now)s
WHERE alert_key = %(alert_key)s AND firing
RETURNING alert_key;

-- name: unclaim_alert
-- Puts an alert back to firing or not after its notification could not be published, so that
-- the next run tries again.
UPDATE tidings.alerts
SET firing = %(firing)s,
    resolved_at = CASE WHEN %(firing)s THEN NULL ELSE resolved_at END
WHERE alert_key = %(alert_key)s;
