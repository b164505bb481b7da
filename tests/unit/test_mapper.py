"""Events survive the trip through the pydantic/orjson mapper unchanged."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

from adapters.event_store import PydanticMapper
from domain.conversation import Conversation


def test_round_trip_preserves_every_field() -> None:
    at = datetime(2026, 5, 4, 3, 2, 1, 123456, tzinfo=UTC)
    conversation = Conversation.start(
        id=uuid4(), owner="alice", at=at, title="T", tags=["a"], document_context={"doc": [1, 2]}
    )
    conversation.add_message(
        message_id=uuid4(), at=at, role="agent", content="héllo ✓", metadata={"k": {"n": 1.5}}, pinned=True
    )
    mapper = PydanticMapper()
    for event in conversation.collect_events():
        stored = mapper.to_stored_event(event)
        assert stored.topic.startswith("domain.conversation:Conversation.")
        assert mapper.to_domain_event(stored) == event
