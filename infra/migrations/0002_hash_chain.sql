-- Tamper-evident streams: every stored event carries a SHA-256 hash over its content and
-- the hash of the event before it in the same stream, computed by the database when the
-- event is inserted (same transaction), so no writer can skip or forge it.
--
--   hash(e) = sha256(prev || uuid(16) || int8 version || field(topic UTF-8) || field(state))
--   field(b) = int4 length of b, then b; a NULL is the length -1 and no bytes
--   prev     = hash of (originator_id, version - 1), or 32 zero bytes for a stream's first event
--
-- Integers are big-endian two's complement (Postgres' binary send format). The layout is
-- documented in docs/architecture.md ("Audit") and recomputed independently by
-- adapters/audit.py, which is what `chronicle audit verify` trusts, not this function.

ALTER TABLE chronicle.events ADD COLUMN hash bytea;

CREATE FUNCTION chronicle.hash_field(value bytea) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN value IS NULL THEN '\xffffffff'::bytea ELSE int4send(length(value)) || value END
$$;

CREATE FUNCTION chronicle.event_hash(
    prev bytea, originator_id uuid, originator_version bigint, topic text, state bytea
) RETURNS bytea
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT sha256(
        prev || uuid_send(originator_id) || int8send(originator_version)
        || chronicle.hash_field(convert_to(topic, 'UTF8')) || chronicle.hash_field(state)
    )
$$;

-- Existing events, chained in stream order. The append-only trigger refuses every UPDATE,
-- so it is off for this transaction only (ALTER TABLE is transactional and holds the
-- table's exclusive lock until commit: no one else writes or sees it off).
ALTER TABLE chronicle.events DISABLE TRIGGER events_append_only;
DO $$
DECLARE
    event record;
    prev bytea;
    stream uuid;
BEGIN
    FOR event IN
        SELECT ctid, originator_id, originator_version, topic, state
        FROM chronicle.events ORDER BY originator_id, originator_version
    LOOP
        IF stream IS DISTINCT FROM event.originator_id THEN
            prev := decode(repeat('00', 32), 'hex');
            stream := event.originator_id;
        END IF;
        prev := chronicle.event_hash(prev, event.originator_id, event.originator_version, event.topic, event.state);
        UPDATE chronicle.events SET hash = prev WHERE ctid = event.ctid;
    END LOOP;
END;
$$;
ALTER TABLE chronicle.events ENABLE TRIGGER events_append_only;
ALTER TABLE chronicle.events ALTER COLUMN hash SET NOT NULL;

-- A BEFORE ROW trigger's queries see the rows its statement inserted before this one, so a
-- batch holding several versions of one stream (in version order, as the recorder writes
-- them) chains each to the one before. Any hash a writer supplies is replaced.
CREATE FUNCTION chronicle.chain_event() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    prev bytea;
BEGIN
    SELECT e.hash INTO prev FROM chronicle.events e
    WHERE e.originator_id = NEW.originator_id AND e.originator_version = NEW.originator_version - 1;
    IF NOT FOUND THEN
        -- Only a stream's first event chains from the zero hash; a gap would make an
        -- unverifiable chain, so it is refused rather than stored.
        IF EXISTS (
            SELECT 1 FROM chronicle.events e
            WHERE e.originator_id = NEW.originator_id AND e.originator_version < NEW.originator_version
        ) THEN
            RAISE EXCEPTION 'chronicle.events hash chain: version % of a stream follows a gap',
                NEW.originator_version;
        END IF;
        prev := decode(repeat('00', 32), 'hex');
    END IF;
    NEW.hash := chronicle.event_hash(prev, NEW.originator_id, NEW.originator_version, NEW.topic, NEW.state);
    RETURN NEW;
END;
$$;

CREATE TRIGGER events_hash_chain
    BEFORE INSERT ON chronicle.events
    FOR EACH ROW EXECUTE FUNCTION chronicle.chain_event();
