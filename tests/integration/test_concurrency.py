"""Two service instances writing one conversation: optimistic concurrency, no lost message."""

from __future__ import annotations

import asyncio

from entrypoints.bootstrap import Chronicle
from tests.conftest import ClientFactory


async def test_concurrent_writers_never_lose_a_message(
    chronicle: Chronicle, second_instance: Chronicle, connect: ClientFactory
) -> None:
    writers = [await connect("concurrency-user") for _ in range(4)]
    started = await writers[0].conversations.start(title="busy")
    conflicts_before = chronicle.bus.conflicts + second_instance.bus.conflicts

    async def write(writer_index: int) -> list[str]:
        sent = []
        for n in range(50):
            content = f"writer {writer_index} message {n}"
            await writers[writer_index].conversations.add_message(started.conversation_id, "user", content)
            sent.append(content)
        return sent

    sent = [m for batch in await asyncio.gather(*(write(i) for i in range(len(writers)))) for m in batch]
    for writer in writers:  # every writer's last position, so the read below sees all of them
        writers[0].last_position = max(writers[0].last_position or 0, writer.last_position or 0)
    conversation = await writers[0].conversations.get(started.conversation_id)

    stored = [m.content for m in conversation.messages]
    assert sorted(stored) == sorted(sent), "every message lands exactly once"
    assert conversation.message_count == len(sent)
    # Both instances decided on cached state, so some saves must have met a newer version.
    assert chronicle.bus.conflicts + second_instance.bus.conflicts > conflicts_before
    events = chronicle.postgres_store.events_of(started.conversation_id)
    assert [e.originator_version for e in events] == list(range(1, len(events) + 1))
