-- Keys of the service itself, one row per use, shared by every instance on this database
-- (adapters/store/keys.py `service_key`): `cursors` seals the cursors list pages hand out,
-- so a cursor one instance gave opens on any other. Made on first use; never a user's.
-- Deleting a row makes the next start make a new key: the cursors sealed under the old
-- one then answer `invalid` (the client pages again from the start).
CREATE TABLE chronicle.service_keys (
    name text PRIMARY KEY,
    key bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
