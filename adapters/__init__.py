"""The edges: Postgres event store and read-model SQL, NATS transport, auth, embedded servers."""
