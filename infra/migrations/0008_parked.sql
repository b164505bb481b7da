-- Items a projection or a relay could not apply or publish, set aside so that it goes on
-- (one event a user could make fail must not stop a read model or a signal relay for
-- everyone). A row says which consumer, which log position, the event's topic and the
-- kind of failure, never the event's content; `chronicle projections status` counts them.
-- The event itself stays in the log: a rebuild (after a fix) applies it again.
CREATE TABLE chronicle.parked (
    consumer text NOT NULL,
    position bigint NOT NULL,
    topic text NOT NULL,
    error text NOT NULL,
    parked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, position)
);
