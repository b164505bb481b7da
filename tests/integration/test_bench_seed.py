"""The benchmarks' seeding writes through the event store as the service does (it broke
once when the recorder's signature changed and nothing ran it)."""

from __future__ import annotations

from adapters.store.event_store import EventStore
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from bench.seed import Scale, seed
from tests.rows import scalar


def test_seeded_history_is_in_the_log_and_readable(target: PostgresTarget) -> None:
    dataset = seed(target, Scale(users=2, conversations=4, messages=30), batch_size=7)

    with target.connect() as conn:
        logged = scalar(conn.execute("SELECT count(*) FROM chronicle.events"))
    assert logged == dataset.events > 30
    assert dataset.messages == 30
    keys = KeyRing(target)
    store = EventStore(target, pool_size=1, keys=keys)
    try:
        conversation_id = next(iter(dataset.owner_of))
        assert store.events_of(conversation_id), "a seeded conversation loads back from its events"
    finally:
        store.close()
        keys.close()
