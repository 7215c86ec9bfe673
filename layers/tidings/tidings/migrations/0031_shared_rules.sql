-- Rules that more than one statement applies, written once.

-- The status of a row given back without an attempt (its lease released, or held back by its
-- endpoint's circuit): pending if it was never tried, failed (awaiting a retry) otherwise.
CREATE FUNCTION tidings.unleased_status(attempts integer) RETURNS tidings.message_status
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN CASE WHEN attempts > 0 THEN 'failed' ELSE 'pending' END::tidings.message_status;

-- Whether an endpoint's circuit lets one probe go now: open with its cooldown over, or half open
-- with a probe that went stale (its lease of lease_s ran out without an outcome).
CREATE FUNCTION tidings.probe_may_start(
    state tidings.circuit_state,
    opened_at timestamptz,
    cooldown_s double precision,
    probe_started_at timestamptz,
    lease_s double precision
) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN (state = 'open' AND opened_at + cooldown_s * interval '1 second' <= now())
    OR (state = 'half_open' AND probe_started_at + lease_s * interval '1 second' <= now());
