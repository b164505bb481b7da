-- A group commit is saved by one statement in its own (autocommit) transaction: the events
-- and the idempotency records that quote their positions go in one round trip, where a
-- transaction block took five (BEGIN, lock and notify, events, replies, COMMIT).
--
-- The reply's position is kept beside it, not in it: the statement learns the events'
-- notification ids only as it inserts them. Replies stored before this migration carry
-- their position inside the reply and leave the column NULL.
ALTER TABLE chronicle.idempotency ADD COLUMN position bigint;

-- Called once per statement before its first event row is made (an uncorrelated scalar
-- subquery: an InitPlan), so the table lock is held before any notification id is drawn,
-- as with the LOCK TABLE statement eventsourcing sends: ids commit in the order they are
-- drawn. The notifications are delivered at commit.
CREATE FUNCTION chronicle.begin_append(channels text[]) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    channel text;
BEGIN
    LOCK TABLE chronicle.events IN EXCLUSIVE MODE;
    FOREACH channel IN ARRAY channels LOOP
        PERFORM pg_notify(channel, '');
    END LOOP;
    RETURN true;
END;
$$;
