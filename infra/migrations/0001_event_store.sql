-- The event store (the shape eventsourcing's PostgresApplicationRecorder expects),
-- made append-only by the database itself, plus idempotency records and projection tracking.

CREATE TYPE chronicle.stored_event_uuid AS (
    originator_id uuid,
    originator_version bigint,
    topic text,
    state bytea
);

CREATE TABLE chronicle.events (
    originator_id uuid NOT NULL,
    originator_version bigint NOT NULL,
    topic text,
    state bytea,
    notification_id bigserial,
    PRIMARY KEY (originator_id, originator_version)
) WITH (
    autovacuum_vacuum_threshold = 100000000,
    autovacuum_vacuum_scale_factor = 0.5,
    autovacuum_analyze_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.01
);

CREATE UNIQUE INDEX events_notification_id_idx ON chronicle.events (notification_id ASC);

-- Stored events are facts: no role, superusers included, may change or remove one.
CREATE FUNCTION chronicle.refuse_event_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'chronicle.events is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER events_append_only
    BEFORE UPDATE OR DELETE ON chronicle.events
    FOR EACH ROW EXECUTE FUNCTION chronicle.refuse_event_change();

CREATE TRIGGER events_no_truncate
    BEFORE TRUNCATE ON chronicle.events
    FOR EACH STATEMENT EXECUTE FUNCTION chronicle.refuse_event_change();

REVOKE UPDATE, DELETE, TRUNCATE ON chronicle.events FROM PUBLIC;

-- A command's reply, kept with its events so a repeated Idempotency-Key replays it.
CREATE TABLE chronicle.idempotency (
    owner text NOT NULL,
    key text NOT NULL,
    fingerprint text NOT NULL,
    reply bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, key)
);
CREATE INDEX idempotency_created_at_idx ON chronicle.idempotency (created_at);

-- Each projection's position in the notification log; written with its read-model rows.
CREATE TABLE chronicle.projections (
    name text PRIMARY KEY,
    position bigint NOT NULL DEFAULT 0,
    version integer NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
