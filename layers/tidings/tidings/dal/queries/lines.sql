-- name: reorder_endpoint
-- After an endpoint's ordering changed, in the same transaction (tidings.reorder_endpoint_v1):
-- to fifo, its messages not yet attempted join their lines; to none, its waiting messages are
-- pending again. Returns how many messages it moved.
SELECT tidings.reorder_endpoint_v1(%(endpoint_id)s);

-- name: list_lines
-- An application's FIFO endpoint's lines that have something on its way or are paused, by
-- ordering key after the cursor key: each line's head (its message, status and attempts) and
-- how many messages wait behind it (counted up to count_limit); one more row than the page size
-- tells whether another page follows.
SELECT f.ordering_key, f.paused_at, h.id AS head_message_id, h.status::text AS head_status,
       h.attempts AS head_attempts, h.next_attempt_at AS head_next_attempt_at,
       (SELECT count(*) FROM (SELECT 1 FROM tidings.queue w
                              WHERE w.endpoint_id = f.endpoint_id
                                AND w.line_key = f.ordering_key AND w.status = 'waiting'
                              LIMIT %(count_limit)s) c)::integer AS waiting
FROM tidings.fifo_lines f
JOIN tidings.endpoints e ON e.id = f.endpoint_id
LEFT JOIN tidings.messages h
    ON h.endpoint_id = f.endpoint_id AND h.line_key = f.ordering_key AND h.line_seq = f.head_seq
WHERE f.endpoint_id = %(endpoint_id)s AND e.app_id = %(app_id)s AND e.deleted_at IS NULL
  AND f.head_seq IS NOT NULL
  AND (%(paused_only)s::boolean IS NOT TRUE OR f.paused_at IS NOT NULL)
  AND (%(after_key)s::text IS NULL OR f.ordering_key > %(after_key)s::text)
ORDER BY f.ordering_key
LIMIT %(limit)s + 1

-- name: resume_lines
-- Resumes an endpoint's paused FIFO lines (tidings.resume_lines_v1): all of them when keys is
-- NULL, else those of the given ordering keys ('' for events without one). Returns the keys of
-- the lines resumed.
SELECT tidings.resume_lines_v1(%(endpoint_id)s, %(keys)s::text[]) AS ordering_key

-- name: place_in_lines
-- Puts messages just made pending again (a replay, a resend, a recovery: in the same
-- transaction) in the lines of their FIFO endpoints (tidings.place_in_lines_v1): at the end of
-- their line in their original order, or, for the dead letters that paused a line, back in
-- their own places. Returns the ids placed, each with the status it now has.
SELECT id, status FROM tidings.place_in_lines_v1(%(message_ids)s::bigint[])
