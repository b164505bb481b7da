"""A stopping service answers every command it has taken: a command queued to the bus from
the subscription's callback (no task of its own) is still answered from its future once its
group commit is over, and none is stored unanswered."""

from __future__ import annotations

import asyncio
import uuid

from chronicle_client.connection import ChronicleClient
from chronicle_contract.errors import ChronicleError

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle
from tests.conftest import JWT_SECRET


async def test_commands_in_flight_when_the_service_stops_are_answered_and_only_they_are_stored(
    instance: tuple[Chronicle, str],
) -> None:
    chronicle, _ = instance
    token = TokenAuthority(secret=JWT_SECRET).issue(f"u-{uuid.uuid4().hex[:8]}")
    client = await ChronicleClient.connect(
        chronicle.nats_url, token, prefix=chronicle.settings.subject_prefix, timeout=10
    )
    try:
        conversation = (await client.conversations.start(title="stopping")).conversation_id
        with chronicle.target.connect() as holder:
            # The log's append lock held: the commands taken wait in their group commit
            # until it is let go, a moment after the stop began.
            holder.execute("LOCK TABLE chronicle.events IN EXCLUSIVE MODE")
            sent = [
                asyncio.create_task(client.conversations.add_message(conversation, "user", f"message {n}"))
                for n in range(300)
            ]
            while not chronicle.service.in_flight:  # (some taken, not yet answered)
                await asyncio.sleep(0)
            stopping = asyncio.create_task(chronicle.service.stop())
            await asyncio.sleep(0.5)
            holder.rollback()
            await stopping
        assert not chronicle.service.in_flight  # (stop returned once what it took was answered)
        outcomes = await asyncio.gather(*sent, return_exceptions=True)
    finally:
        await client.close()

    answered = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert answered  # (those in flight at the stop)
    assert not [o for o in refused if isinstance(o, ChronicleError)]  # (only "nobody serves it" once stopped)

    def stored() -> int:
        with chronicle.target.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM chronicle.events WHERE originator_id = %s AND topic LIKE %s",
                (conversation, "%MessageAdded"),
            ).fetchone()
            return int(row[0]) if row else 0

    assert await asyncio.to_thread(stored) == len(answered)
    assert sorted(reply.position or 0 for reply in answered) == sorted({reply.position or 0 for reply in answered})
