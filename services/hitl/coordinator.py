"""The HITL coordinator: relays checkpoint events to JetStream and expires overdue pauses.

Signals are derived from committed events, never sent before the commit: published right
after it by the command bus's fast path, and again by the relay as the backstop, each
with `Nats-Msg-Id` = the event's notification id, so JetStream keeps one
(services/runtime/event_relay.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

import orjson
import psycopg
from eventsourcing.persistence import StoredEvent
from nats.js import JetStreamContext

from adapters.store.keys import KeyRing
from domain.conversation import Conversation
from domain.hitl import HitlExpired, HitlPaused, HitlResumed, select_history
from services.contract.errors import ChronicleError
from services.contract.hitl import ExpireRun, hitl_stream
from services.runtime.background import Background
from services.runtime.command_bus import Execute
from services.runtime.event_relay import EventRelay

log = logging.getLogger(__name__)

SIGNAL_EVENTS = (HitlPaused, HitlResumed, HitlExpired)
STREAMS_KEPT = 256
SIGNAL_STREAM_EVENTS = (Conversation.MessageAdded, HitlPaused, HitlResumed, HitlExpired)


def message_of(event: Conversation.MessageAdded) -> dict[str, Any]:
    return {
        "id": event.message_id,
        "role": event.role,
        "content": event.content,
        "metadata": event.metadata,
        "pinned": event.pinned,
        "message_type": event.message_type,
        "created_at": event.timestamp,
    }


def build_signal(stream: list[Any], event: Any, position: int) -> tuple[str, dict[str, Any]]:
    """The (event name, payload) a checkpoint event becomes, from its conversation's events."""
    messages = [message_of(e) for e in stream if isinstance(e, Conversation.MessageAdded)]
    pause = next(e for e in reversed(stream) if isinstance(e, HitlPaused) and e.run_id == event.run_id)
    base = {"run_id": event.run_id, "conversation_id": event.originator_id, "position": position, "at": event.timestamp}
    if isinstance(event, HitlPaused):
        history = select_history(messages, event.history, event.timestamp, {event.prompt_message_id})
        checkpoint = event.model_dump(
            include={"step", "checkpoint_type", "prompt", "prompt_message_id", "data", "conversation_mode", "expires_at"}
        )
        return "paused", {**base, "event": "paused", "checkpoint": checkpoint, "history": history}
    if isinstance(event, HitlResumed):
        keep = {pause.prompt_message_id} | ({event.feedback_message_id} if event.feedback_message_id else set())
        history = select_history(messages, pause.history, event.timestamp, keep)
        answer = event.model_dump(include={"approved", "edits", "feedback", "feedback_message_id"})
        return "resumed", {**base, "event": "resumed", **answer, "history": history}
    return "expired", {**base, "event": "expired"}


class SignalRelay(EventRelay):
    name = "hitl_signals"
    relayed = SIGNAL_EVENTS

    def __init__(self, url: str, js: JetStreamContext, prefix: str, keys: KeyRing | None = None):
        super().__init__(url, js, prefix, keys)
        self.stream = hitl_stream(prefix)
        self._streams: OrderedDict[UUID, tuple[int, list[Any]]] = OrderedDict()

    def select(self, events: Sequence[tuple[int, Any]]) -> list[tuple[int, Any]]:
        # Checkpoint events, and the messages of conversations whose events are kept (so
        # the next signal of such a conversation reads nothing from the database).
        checkpointed = {event.originator_id for _, event in events if isinstance(event, self.relayed)}
        return [
            (position, event)
            for position, event in events
            if isinstance(event, SIGNAL_STREAM_EVENTS)
            and (event.originator_id in checkpointed or event.originator_id in self._streams)
        ]

    def observe(self, event: Any) -> None:
        """Extend the kept events of the event's conversation when it is the next one."""
        kept = self._streams.get(event.originator_id)
        if kept is not None and kept[0] == event.originator_version - 1:
            kept[1].append(event)
            self._streams[event.originator_id] = (event.originator_version, kept[1])

    async def publish(self, conn: psycopg.AsyncConnection, position: int, event: Any) -> None:
        self.observe(event)
        stream = await self._stream(conn, event.originator_id, event.originator_version)
        name, payload = build_signal(stream, event, position)
        await self.js.publish(
            f"{self.prefix}.hitl.{payload['run_id']}.{name}",
            orjson.dumps(payload),
            stream=self.stream,
            headers={"Nats-Msg-Id": f"{self.stream}:{position}"},
        )

    async def _stream(self, conn: psycopg.AsyncConnection, conversation_id: UUID, up_to: int) -> list[Any]:
        """The conversation's messages and checkpoint events up to version `up_to`. What was
        read for an earlier signal is kept (a few hundred conversations), so a signal
        reads and decrypts only the events since, not the whole conversation again."""
        seen_version, kept = self._streams.pop(conversation_id, (0, []))
        if seen_version < up_to:
            cur = await conn.execute(
                "SELECT originator_version, topic, state FROM chronicle.events WHERE originator_id = %s"
                " AND originator_version > %s AND originator_version <= %s ORDER BY originator_version",
                (conversation_id, seen_version, up_to),
                prepare=True,
            )
            for version, topic, state in await cur.fetchall():
                event = self.mapper.to_domain_event(StoredEvent(conversation_id, version, topic, state))
                if isinstance(event, SIGNAL_STREAM_EVENTS):
                    kept.append(event)
            seen_version = up_to
        self._streams[conversation_id] = (seen_version, kept)
        while len(self._streams) > STREAMS_KEPT:
            self._streams.popitem(last=False)
        return [event for event in kept if event.originator_version <= up_to]


class ExpirySweeper(Background):
    """Expires paused checkpoints whose time is up; every instance may sweep, the domain
    makes a second expiry of the same checkpoint a no-op."""

    name = "hitl-expiry"

    def __init__(self, due: Callable[[], Awaitable[list[dict[str, Any]]]], execute: Execute, interval: float = 0.5):
        super().__init__()
        self.due = due
        self.execute = execute
        self.interval = interval

    async def _run(self) -> None:
        while True:
            try:
                for run in await self.due():
                    await self.execute(ExpireRun(run_id=run["run_id"]), run["owner"])
            except asyncio.CancelledError:
                raise
            except psycopg.errors.UndefinedTable:
                pass  # the hitl read model is still being built at first start
            except (ChronicleError, psycopg.Error) as error:
                log.warning("expiry sweep failed; retrying", extra={"error_type": type(error).__name__})
            await asyncio.sleep(self.interval)
