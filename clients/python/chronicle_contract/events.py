"""The event feed's contract: every committed event, once and in log order, on the JetStream
stream `<PREFIX>_EVENTS` under `<prefix>.events.<aggregate>.<event>` (e.g.
`chronicle.events.conversation.message_added`), its POSITION_HEADER the event's position;
positions rise with the stream's sequences, with no hole and none twice.

A feed event carries what the event store keeps in the clear (ids, type, version, time,
owner) and the rest as the store holds it: sealed with the owner's key, so that erasing the
owner leaves nothing readable in the stream either. Reading the stream takes a token with
the `feed` role (clients/python/chronicle_contract/bus.py); content is read through `audit.stream`.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from uuid import UUID

from chronicle_contract.base import Reply

FEED_ROLE = "feed"
POSITION_HEADER = "Chronicle-Position"
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def events_stream(prefix: str) -> str:
    """The stream's name (stream names allow no dots)."""
    return prefix.replace(".", "_").upper() + "_EVENTS"


def snake(name: str) -> str:
    return _WORD_BREAK.sub("_", name).lower()


def feed_names(event_type: str) -> tuple[str, str]:
    """("conversation", "message_added") of "Conversation.MessageAdded"."""
    aggregate, _, event = event_type.rpartition(".")
    return snake(aggregate), snake(event)


def event_subject(prefix: str, event_type: str) -> str:
    aggregate, event = feed_names(event_type)
    return f"{prefix}.events.{aggregate}.{event}"


def feed_filter(prefix: str, wanted: str | None) -> str:
    """The subject a follower's `filter` names: "conversation.*", "job.completed", or None for all."""
    return f"{prefix}.events.{wanted}" if wanted else f"{prefix}.events.>"


class FeedEvent(Reply):
    position: int  # the event's notification id: the log's order
    aggregate_id: UUID
    aggregate: str  # "conversation"
    event: str  # "message_added"
    type: str  # "Conversation.MessageAdded", as audit.stream names it
    version: int
    timestamp: datetime
    owner: str
    data: dict[str, Any]  # the fields kept in the clear (ids, class_version); the system's own events whole
    sealed: str | None = None  # the other fields, sealed with the owner's key (unreadable once erased)
    truncated: bool = False  # too large for one message: `sealed` is left out (read it with audit.stream)
