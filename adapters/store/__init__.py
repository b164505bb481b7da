"""PostgreSQL: the event store and its mapper, snapshots, data keys, blobs, hash chains, digests, migrations; an in-memory store for tests."""
