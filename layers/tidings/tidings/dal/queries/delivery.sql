-- name: claim_due
-- Leases up to batch_size due rows for lease_s seconds (tidings.claim_due_v2): fair across
-- applications, then across each application's endpoints, continuing where the last round
-- stopped; skips disabled endpoints and open circuits, gives a cooled-down endpoint one probe
-- row, spends rate-limited endpoints' tokens, keeps no more than max_in_flight rows in flight in
-- all and no more than an endpoint's cap of its own (its max_in_flight, else slow_max_in_flight
-- while it is slow, else untried_max_in_flight until it first answers); each row says whether
-- its endpoint is in the slow lane and whether it has ever answered.
SELECT * FROM tidings.claim_due_v2(%(batch_size)s, %(lease_s)s, %(probe_lease_s)s,
                                   %(inline_payload_bytes)s, %(max_in_flight)s,
                                   %(slow_max_in_flight)s, %(untried_max_in_flight)s);

-- name: mark_slow
-- Puts endpoints whose attempt was slow in the slow lane for hold_s seconds
-- (tidings.mark_slow_v1); returns how many health rows it wrote.
SELECT tidings.mark_slow_v1(%(ids)s::bigint[], %(hold_s)s);

-- name: mark_quick
-- Counts a quick answer in the slow lane, to a request sent at sent_at, for each endpoint still
-- marked slow; the one that makes release_after in a row ends its mark, once per hold_s at most
-- (tidings.mark_quick_v1); returns how many marks ended.
SELECT tidings.mark_quick_v1(%(ids)s::bigint[], %(sent_at)s, %(release_after)s, %(hold_s)s);

-- name: release_leases
-- Gives leased rows back without an attempt, due again after delay_s, where the lease token still
-- holds them (tidings.release_leases_v1); returns the ids released.
SELECT id FROM tidings.release_leases_v1(%(ids)s::bigint[], %(tokens)s::uuid[], %(delay_s)s) AS id;

-- name: begin_attempts
-- A sender starts work on queued rows (tidings.begin_attempts_v4): the rows it still holds for
-- this attempt, each permitted or held back by its endpoint's circuit, the permitted ones under a
-- fresh lease token, with what sending needs (and what building the body needs: the endpoint's
-- payload format, when the event was accepted; the endpoint's receiver credentials, sealed; the
-- row's FIFO line, and the messages a batching FIFO endpoint's head carries, as rows of their own).
SELECT * FROM tidings.begin_attempts_v4(%(ids)s::bigint[], %(tokens)s::uuid[],
                                        %(attempts)s::integer[], %(want_payload)s::boolean[],
                                        %(lease_s)s, %(hold_back_s)s);

-- name: record_outcomes
-- Writes a batch's outcomes, attempts, circuit updates and disabled endpoints atomically
-- (tidings.record_outcomes_v1); returns the rows written, the circuit transitions and the
-- endpoints disabled. Safe to send again after a lost connection.
SELECT written_ids, transitions, disabled_ids
FROM tidings.record_outcomes_v1(%(outcomes)s::jsonb, %(health_endpoint_ids)s::bigint[],
                                %(has_success)s::boolean[], %(trailing_failures)s::integer[],
                                %(last_success_at)s::timestamptz[],
                                %(last_failure_at)s::timestamptz[], %(disable_ids)s::bigint[],
                                %(disable_reasons)s::text[], %(base_cooldown_s)s,
                                %(max_cooldown_s)s);

-- name: advance_lines
-- Moves FIFO lines on whose heads were settled (tidings.advance_lines_v1): each line's next
-- waiting message becomes its head, leased for lease_s and returned where its endpoint takes
-- deliveries without the claim (lease_s NULL: none is), due for the claim otherwise. Lines
-- another advancer holds are skipped: their notes stay for the claimer.
SELECT * FROM tidings.advance_lines_v1(%(endpoint_ids)s::bigint[], %(keys)s::text[],
                                       %(lease_s)s::double precision, false, false);

-- name: advance_noted_lines
-- The claimer moves on the FIFO lines of up to limit notes (tidings.advance_noted_lines_v1):
-- producers' new waiting messages, and heads whose line no sender moved on. Returns how many
-- lines it looked at.
SELECT tidings.advance_noted_lines_v1(%(limit)s);
