"""The machinery every capability runs on: command bus, unit of work, snapshots, relays, read-your-writes."""
