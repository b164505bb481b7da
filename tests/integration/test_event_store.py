"""The database itself keeps stored events append-only."""

from __future__ import annotations

import asyncio

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
