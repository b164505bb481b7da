"""hitl.take: the answer to a run's checkpoint, handed to its orchestrator once.

The conversation records that the answer was taken (HitlAnswerTaken), so a second
orchestrator, or the same one after a restart, does not get it again; the answer's content
(approval, edits, feedback and the history window the pause asked for) is read from the
conversation's events for the caller who took it. Nothing of it travels on a signal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.hitl import AnswerTaken, RecordTaken, TakeAnswer

from domain.conversation import Conversation
from domain.hitl import HitlPaused, HitlResumed, select_history
from services.runtime.command_bus import CommandBus
from services.runtime.replies import Wire

# What an answer's history may hold (content and metadata), well under a NATS message.
ANSWER_HISTORY_BYTES = 512 * 1024
# A conversation's events, content unsealed (the event store's events_of).
EventsOf = Callable[[UUID], Sequence[Any]]


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


def resume_answer(events: Sequence[Any], run_id: str, position: int | None) -> dict[str, Any]:
    """The run's last resume, with the history window its pause asked for."""
    resumed = next(e for e in reversed(events) if isinstance(e, HitlResumed) and e.run_id == run_id)
    pause = next(
        e for e in reversed(events)
        if isinstance(e, HitlPaused) and e.run_id == run_id and e.originator_version < resumed.originator_version
    )
    messages = [message_of(e) for e in events if isinstance(e, Conversation.MessageAdded)]
    keep = {pause.prompt_message_id} | ({resumed.feedback_message_id} if resumed.feedback_message_id else set())
    history, truncated = within_bytes(select_history(messages, pause.history, resumed.timestamp, keep), keep)
    return {
        "event": "resumed",
        "run_id": run_id,
        "conversation_id": resumed.originator_id,
        "position": position,
        "at": resumed.timestamp,
        **resumed.model_dump(include={"approved", "edits", "feedback", "feedback_message_id"}),
        "history": history,
        "history_truncated": truncated,
    }


def within_bytes(history: list[dict[str, Any]], keep: set[UUID]) -> tuple[list[dict[str, Any]], bool]:
    """The history, its oldest messages left out (never the prompt or the feedback) while
    it holds more than ANSWER_HISTORY_BYTES: the answer must fit in one NATS reply, or the
    orchestrator would never get an answer it has taken."""
    sizes = [len(m["content"]) + len(orjson.dumps(m["metadata"])) for m in history]
    total, dropped = sum(sizes), set()
    for message, size in zip(history, sizes, strict=True):
        if total <= ANSWER_HISTORY_BYTES:
            break
        if message["id"] not in keep:
            dropped.add(message["id"])
            total -= size
    return [m for m in history if m["id"] not in dropped], bool(dropped)


class Answers:
    def __init__(self, bus: CommandBus, events_of: EventsOf):
        self.bus = bus
        self.events_of = events_of

    async def take(self, user: str, cmd: TakeAnswer, key: str | None) -> Wire[AnswerTaken]:
        taken = await self.bus.execute(RecordTaken(run_id=cmd.run_id), user, key)
        if taken["status"] != "resumed":
            return taken
        events = await asyncio.to_thread(self.events_of, UUID(taken["conversation_id"]))
        return Wire({**taken, "answer": resume_answer(events, cmd.run_id, taken.get("position"))})
