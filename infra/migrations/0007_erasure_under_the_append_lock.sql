-- A user's erasure destroys their data key in the statement that records it, and a
-- statement that seals content for a user whose key is gone is refused, both under the
-- append lock that orders every statement saving events. So no write of an erased user
-- commits after their erasure, whatever key any process (another instance, the projection
-- process) still holds in its cache: it was read before, and it can no longer be used.
CREATE FUNCTION chronicle.begin_append(channels text[], writers text[], erased text[]) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    channel text;
BEGIN
    LOCK TABLE chronicle.events IN EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM chronicle.data_keys WHERE owner = ANY(writers) AND key IS NULL) THEN
        RAISE EXCEPTION 'content for an erased user' USING ERRCODE = 'CH001';
    END IF;
    IF cardinality(erased) > 0 THEN
        INSERT INTO chronicle.data_keys (owner, key, erased_at)
            SELECT DISTINCT e, NULL::bytea, now() FROM unnest(erased) AS e
        ON CONFLICT (owner) DO UPDATE SET key = NULL, erased_at = coalesce(data_keys.erased_at, now());
    END IF;
    FOREACH channel IN ARRAY channels LOOP
        PERFORM pg_notify(channel, '');
    END LOOP;
    RETURN true;
END;
$$;

DROP FUNCTION chronicle.begin_append(text[]);
