"""The database itself keeps stored events append-only."""

from __future__ import annotations

import asyncio
import dataclasses

import psycopg
import pytest
from chronicle_client.connection import ChronicleClient

from entrypoints.bootstrap import Chronicle


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE chronicle.events SET state = 'x'::bytea",
        "DELETE FROM chronicle.events",
        "TRUNCATE chronicle.events",
    ],
)
async def test_stored_events_cannot_change(chronicle: Chronicle, client: ChronicleClient, statement: str) -> None:
    started = await client.conversations.start(title="immutable")
    before = chronicle.postgres_store.events_of(started.conversation_id)
    def tamper() -> None:
        # The service's own role (a superuser here) is refused too: the trigger binds everyone.
        with psycopg.connect(chronicle.target.url) as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
                conn.execute(statement)

    # In a thread: TRUNCATE waits for the in-process service's transactions, which need
    # this event loop to finish.
    await asyncio.to_thread(tamper)
    assert chronicle.postgres_store.events_of(started.conversation_id) == before


async def test_events_stored_as_sent_are_found_with_their_positions(chronicle: Chronicle, client: ChronicleClient) -> None:
    """What the command bus asks after a save it did not hear commit (an unkeyed command
    keeps no record): its events are found only with the very state it sent."""
    started = await client.conversations.start(title="found")
    added = await client.conversations.add_message(started.conversation_id, "user", "hello")
    recorder = chronicle.postgres_store.recorder
    stored = await asyncio.to_thread(recorder.streams, {started.conversation_id: 0})
    found = await asyncio.to_thread(recorder.positions_of, stored)
    assert sorted(found.values())[-1] == added.position
    assert sorted(found) == [(e.originator_id, e.originator_version) for e in stored]
    another = [dataclasses.replace(stored[0], state=stored[0].state + b" ")]  # (another writer's, at that version)
    assert await asyncio.to_thread(recorder.positions_of, another) == {}
