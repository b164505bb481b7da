-- Snapshots of aggregates with long histories (adapters/snapshots.py): the state after
-- `originator_version`, sealed with the owner's key like the events' content, so an
-- erasure makes them unreadable too. Derived data: any row may be deleted (a load then
-- folds more events) and only the latest few per aggregate are kept. `modified_on` is the
-- time of the aggregate's event at that version, so an audit "as of time T" can start
-- from the latest snapshot taken at or before T.
CREATE TABLE chronicle.snapshots (
    originator_id uuid NOT NULL,
    originator_version bigint NOT NULL,
    topic text NOT NULL,
    state bytea NOT NULL,
    modified_on timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (originator_id, originator_version)
);
