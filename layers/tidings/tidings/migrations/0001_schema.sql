-- The delivery queue: endpoints, their subscriptions and health, events, messages, attempts, alerts.

CREATE TYPE tidings.message_status AS ENUM ('pending', 'in_flight', 'delivered', 'failed', 'dead_letter');
CREATE TYPE tidings.circuit_state AS ENUM ('closed', 'open', 'half_open');

CREATE TABLE tidings.endpoints (
    id                          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url                         text NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2048),
    description                 text NOT NULL DEFAULT '' CHECK (length(description) <= 1000),
    enabled                     boolean NOT NULL DEFAULT true,
    disabled_reason             text,
    disabled_at                 timestamptz,
    -- A deleted endpoint keeps its row so that its messages and attempts keep their history.
    deleted_at                  timestamptz,
    secret                      text NOT NULL CHECK (secret LIKE 'whsec\_%'),
    previous_secret             text CHECK (previous_secret LIKE 'whsec\_%'),
    previous_secret_expires_at  timestamptz,
    -- Per-endpoint overrides; NULL means the deployment's default.
    max_attempts                integer CHECK (max_attempts BETWEEN 1 AND 100),
    timeout_ms                  integer CHECK (timeout_ms BETWEEN 100 AND 60000),
    rate_limit_per_s            double precision CHECK (rate_limit_per_s > 0),
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL))
);

-- An endpoint receives the event types it subscribes to; '*' subscribes to every type.
CREATE TABLE tidings.subscriptions (
    endpoint_id  bigint NOT NULL REFERENCES tidings.endpoints (id) ON DELETE CASCADE,
    event_type   text NOT NULL CHECK (event_type <> '' AND length(event_type) <= 200),
    PRIMARY KEY (endpoint_id, event_type)
);
CREATE INDEX subscriptions_by_event_type ON tidings.subscriptions (event_type);

-- One row per endpoint: the circuit breaker, the rate-limit token bucket and latency figures.
CREATE TABLE tidings.endpoint_health (
    endpoint_id           bigint PRIMARY KEY REFERENCES tidings.endpoints (id) ON DELETE CASCADE,
    state                 tidings.circuit_state NOT NULL DEFAULT 'closed',
    consecutive_failures  integer NOT NULL DEFAULT 0,
    failure_threshold     integer NOT NULL DEFAULT 10 CHECK (failure_threshold > 0),
    cooldown_s            double precision NOT NULL DEFAULT 300 CHECK (cooldown_s > 0),
    opened_at             timestamptz,
    -- The lease token of the one message allowed through while half open.
    probe_token           uuid,
    probe_started_at      timestamptz,
    last_success_at       timestamptz,
    last_failure_at       timestamptz,
    rate_tokens           double precision NOT NULL DEFAULT 0,
    rate_refilled_at      timestamptz NOT NULL DEFAULT now(),
    p50_ms                double precision,
    p95_ms                double precision,
    p99_ms                double precision,
    sample_count          integer NOT NULL DEFAULT 0,
    percentiles_at        timestamptz,
    CHECK (state <> 'open' OR opened_at IS NOT NULL)
);

CREATE FUNCTION tidings.create_endpoint_health() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO tidings.endpoint_health (endpoint_id, rate_tokens)
    VALUES (NEW.id, coalesce(NEW.rate_limit_per_s, 0));
    RETURN NEW;
END $$;

CREATE TRIGGER endpoints_have_health AFTER INSERT ON tidings.endpoints
    FOR EACH ROW EXECUTE FUNCTION tidings.create_endpoint_health();

-- An event as the producer sent it. (event_type, event_id) is the idempotency key: the payload
-- is stored once however many endpoints it fans out to.
CREATE TABLE tidings.events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_type  text NOT NULL CHECK (event_type <> '' AND length(event_type) <= 200),
    event_id    text NOT NULL CHECK (event_id <> '' AND length(event_id) <= 200),
    payload     jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_idempotency_key UNIQUE (event_type, event_id)
);

-- The delivery queue: one row per event and endpoint.
-- next_attempt_at is the earliest time the claimer may take the row: the due time of a pending or
-- failed row, and the lease expiry of a row in flight. So one index serves both due rows and
-- expired leases, and a row can never stay in flight forever.
CREATE TABLE tidings.messages (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_ref         bigint NOT NULL REFERENCES tidings.events (id),
    endpoint_id       bigint NOT NULL REFERENCES tidings.endpoints (id),
    event_type        text NOT NULL,
    status            tidings.message_status NOT NULL DEFAULT 'pending',
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts      integer CHECK (max_attempts BETWEEN 1 AND 100),
    created_at        timestamptz NOT NULL DEFAULT now(),
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    delivered_at      timestamptz,
    dead_lettered_at  timestamptz,
    lease_token       uuid,
    last_error        text,
    last_status_code  integer,
    last_response_ms  integer,
    UNIQUE (event_ref, endpoint_id),
    CHECK (status <> 'in_flight' OR lease_token IS NOT NULL),
    CHECK (status <> 'delivered' OR delivered_at IS NOT NULL),
    CHECK (status <> 'dead_letter' OR dead_lettered_at IS NOT NULL)
);

-- The claim path: per endpoint, the rows that may be taken, oldest due first.
CREATE INDEX messages_claimable ON tidings.messages (endpoint_id, next_attempt_at)
    WHERE status IN ('pending', 'failed', 'in_flight');
-- Dead-letter reports, replay and pruning by endpoint and time.
CREATE INDEX messages_dead_letters ON tidings.messages (endpoint_id, dead_lettered_at)
    WHERE status = 'dead_letter';
CREATE INDEX messages_delivered ON tidings.messages (delivered_at) WHERE status = 'delivered';
-- Look-ups by event use the unique (event_ref, endpoint_id) index; no index of its own, since
-- every index is one more write on every status change of the hottest table.

-- One row per HTTP attempt: the delivery log and the latency source. Partitioned by day so that
-- pruning drops partitions; the default partition means an insert never fails for want of one.
CREATE TABLE tidings.attempts (
    id                bigint GENERATED ALWAYS AS IDENTITY,
    message_id        bigint NOT NULL,
    endpoint_id       bigint NOT NULL,
    attempt_number    integer NOT NULL,
    attempted_at      timestamptz NOT NULL DEFAULT now(),
    status_code       integer,
    response_ms       integer,
    error_class       text,
    response_excerpt  text,
    PRIMARY KEY (id, attempted_at)
) PARTITION BY RANGE (attempted_at);

CREATE TABLE tidings.attempts_default PARTITION OF tidings.attempts DEFAULT;
-- One row per attempt even when a batch's outcomes are written twice (a connection lost after
-- the commit and the statement sent again); it also serves look-ups by message.
CREATE UNIQUE INDEX attempts_once ON tidings.attempts (message_id, attempted_at, attempt_number);
CREATE INDEX attempts_by_endpoint_time ON tidings.attempts (endpoint_id, attempted_at);

-- Creates the daily (UTC) partitions of attempts for [from_day, from_day + days) that do not exist yet.
CREATE FUNCTION tidings.create_attempt_partitions(from_day date, days integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    created integer := 0;
    name text;
BEGIN
    FOR i IN 0 .. days - 1 LOOP
        day := from_day + i;
        name := 'attempts_' || to_char(day, 'YYYYMMDD');
        IF to_regclass('tidings.' || name) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE tidings.%I PARTITION OF tidings.attempts FOR VALUES FROM (%L) TO (%L)',
                name, day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

SELECT tidings.create_attempt_partitions((now() AT TIME ZONE 'UTC')::date - 1, 4);

-- What was alerted when, so a condition that holds is reported once and its end once.
CREATE TABLE tidings.alerts (
    alert_key         text PRIMARY KEY,
    kind              text NOT NULL,
    firing            boolean NOT NULL,
    first_fired_at    timestamptz NOT NULL DEFAULT now(),
    last_notified_at  timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz,
    details           jsonb NOT NULL DEFAULT '{}'
);
