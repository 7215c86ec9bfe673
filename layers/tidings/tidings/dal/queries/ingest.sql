-- name: enqueue_event
-- One event for an application (its uid) through the producers' path (tidings.enqueue shares
-- it): its message ids and whether this call created the event or found an earlier one with the
-- same key.
SELECT e.event_ref, e.created, e.message_ids
FROM tidings.enqueue_event(%(event_type)s, %(payload)s::jsonb, %(event_id)s,
                           %(endpoint_ids)s::bigint[], %(application)s) AS e

-- name: enqueue_batch
-- Many events for one application (its uid) in one call, inserted in key order; one row per
-- input element, in input order.
SELECT b.item, b.event_ref, b.created, b.message_ids
FROM tidings.enqueue_batch(%(events)s::jsonb, %(application)s) AS b
