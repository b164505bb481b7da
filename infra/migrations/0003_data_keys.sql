-- Per-user data keys for crypto-shredding (adapters/keys.py). Erasing a user sets `key`
-- to NULL for good: the content of that user's events becomes unreadable, the events
-- themselves (ids, timestamps, types, hash chains) stay.
CREATE TABLE chronicle.data_keys (
    owner text PRIMARY KEY,
    key bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    erased_at timestamptz,
    CHECK ((key IS NULL) = (erased_at IS NOT NULL))
);
