"""The relays' fast path (adapters/read_side/relay.py), without servers: what the command
bus tells it after a commit is published at once, under the owner the bus names."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

from adapters.read_side.relay import EventRelay
from domain.conversation import Conversation
from domain.hitl import HitlPaused
from services.ports.relays import Relay
from tests.unit.test_hitl import paused

NO_DATABASE = "postgresql://nobody@127.0.0.1:1/none"  # the fast path must not need it


class Published(Relay):
    name = "fast_path_test"
    relayed: ClassVar[tuple[type, ...]] = (HitlPaused,)

    def __init__(self) -> None:
        self.published: list[tuple[int, Any, str]] = []

    async def publish(self, position: int, event: Any, owner: str) -> None:
        self.published.append((position, event, owner))


def pause_event() -> HitlPaused:
    conversation: Conversation = paused()
    return next(e for e in conversation.collect_events() if isinstance(e, HitlPaused))


async def test_the_fast_path_publishes_under_the_owner_the_bus_names_without_asking_the_log() -> None:
    relay = Published()
    following = EventRelay(NO_DATABASE, relay)
    following.loop = asyncio.get_running_loop()
    event = pause_event()
    following.committed([(7, event, "alice"), (8, object(), "alice")])  # (a second event it does not relay)
    await asyncio.sleep(0)  # (it is handed over to the loop, as from the bus's writer thread)
    await asyncio.gather(*following._fast_tasks)
    assert relay.published == [(7, event, "alice")]
    assert following._published == {7}
