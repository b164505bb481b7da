"""The read side on Postgres: the projection engine, the read-model views and reader, read-your-writes positions, the relays that follow the log."""
