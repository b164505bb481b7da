-- Data keys and service keys are kept wrapped by a key-encryption key (KEK) held outside
-- Postgres (adapters/store/kek.py), never in clear: `wrapped` is the key sealed under KEK
-- generation `kek_generation`. The clear `key` column stays only for the upgrade: the
-- first start after this migration wraps every clear key, empties the column and rewrites
-- the tables (adapters/store/kek_rotation.py `attach`).
--
-- An erased row keeps `kek_generation`, the generation its key was last wrapped under: that
-- generation must be destroyed (a KEK rotation) before no copy of the database can unwrap
-- the key; the rotation clears it then. `erased_at` alone says the user is erased.
ALTER TABLE chronicle.data_keys
    ADD COLUMN wrapped bytea,
    ADD COLUMN kek_generation integer,
    DROP CONSTRAINT data_keys_check,
    ADD CONSTRAINT data_keys_one_form CHECK (key IS NULL OR wrapped IS NULL),
    ADD CONSTRAINT data_keys_erased_hold_nothing CHECK (erased_at IS NULL OR (key IS NULL AND wrapped IS NULL));

CREATE INDEX data_keys_rotation_idx ON chronicle.data_keys (kek_generation) WHERE kek_generation IS NOT NULL;

ALTER TABLE chronicle.service_keys
    ALTER COLUMN key DROP NOT NULL,
    ADD COLUMN wrapped bytea,
    ADD COLUMN kek_generation integer,
    ADD CONSTRAINT service_keys_one_form CHECK ((key IS NULL) <> (wrapped IS NULL));

-- Where this store's KEKs are (`dir:PATH`, `file:PATH`, `env:NAME`: never a key) and the
-- generation new keys are wrapped under. A key is made only under this generation (its
-- INSERT reads this row FOR SHARE), so a rotation that moved it on waits for the keys
-- being made under the old one, and none is made under the old one after.
-- `provisional`: attached by a tool that seeded the store before any service ran; the
-- first service to start moves the keys to its own KEKs. Otherwise a process given other
-- KEKs than these is refused.
CREATE TABLE chronicle.kek_state (
    one_row boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    location text NOT NULL,
    generation integer NOT NULL,
    provisional boolean NOT NULL DEFAULT false
);

-- Erasure as in 0007, keyed on `erased_at` (a live key is now `wrapped`, not `key`).
CREATE OR REPLACE FUNCTION chronicle.begin_append(channels text[], writers text[], erased text[]) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    channel text;
BEGIN
    LOCK TABLE chronicle.events IN EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM chronicle.data_keys WHERE owner = ANY(writers) AND erased_at IS NOT NULL) THEN
        RAISE EXCEPTION 'content for an erased user' USING ERRCODE = 'CH001';
    END IF;
    IF cardinality(erased) > 0 THEN
        INSERT INTO chronicle.data_keys (owner, key, erased_at)
            SELECT DISTINCT e, NULL::bytea, now() FROM unnest(erased) AS e
        ON CONFLICT (owner) DO UPDATE
            SET key = NULL, wrapped = NULL, erased_at = coalesce(data_keys.erased_at, now());
    END IF;
    FOREACH channel IN ARRAY channels LOOP
        PERFORM pg_notify(channel, '');
    END LOOP;
    RETURN true;
END;
$$;
