-- Alerts are never lost: the notification of an alert is written, in the statement that claims
-- the alert, to an outbox, and leaves it only once it was published. A run that dies between the
-- claim and the publish leaves it there, and a later run publishes it.
CREATE TABLE tidings.alert_outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    alert_key   text NOT NULL,
    subject     text NOT NULL,
    body        text NOT NULL,
    attributes  jsonb NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- When a run may take it: the run that wrote or took it moves this a claim period ahead, so
    -- an overlapping run leaves it alone while that run publishes; if it dies, it is due again.
    due_at      timestamptz NOT NULL,
    tries       integer NOT NULL DEFAULT 1
);
CREATE INDEX alert_outbox_due ON tidings.alert_outbox (due_at, id);
