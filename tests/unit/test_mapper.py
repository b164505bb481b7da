"""Events survive the trip through the pydantic/orjson mapper unchanged, sealed or not."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import uuid4

import orjson
import pytest
from cryptography.exceptions import InvalidTag
from eventsourcing.persistence import StoredEvent

from adapters.store.audit_decoder import Decoder
from adapters.store.export import payload
from adapters.store.mapper import ErasedContent, PydanticMapper
from adapters.store.memory import InMemoryKeyRing
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


def test_content_is_sealed_with_the_owners_key_and_metadata_stays_clear() -> None:
    at = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    conversation = Conversation.start(id=uuid4(), owner="alice", at=at, title="secret title")
    conversation.add_message(message_id=uuid4(), at=at, role="user", content="secret content", metadata={})
    keys = InMemoryKeyRing()
    mapper = PydanticMapper(keys=keys)
    events = conversation.collect_events()
    stored = [mapper.to_stored_event(event, "alice") for event in events]
    for event, record in zip(events, stored, strict=True):
        assert b"secret" not in record.state
        envelope = orjson.loads(record.state)
        assert envelope["timestamp"] and envelope["_owner"] == "alice"
        assert mapper.to_domain_event(record) == event
    added = events[1]
    assert isinstance(added, Conversation.MessageAdded)
    assert orjson.loads(stored[1].state)["message_id"] == str(added.message_id), "ids stay clear"

    moved = StoredEvent(stored[1].originator_id, 7, stored[1].topic, stored[1].state)
    with pytest.raises(InvalidTag):  # sealed content is bound to its own event
        mapper.to_domain_event(moved)
    keys.keys["alice"] = None
    with pytest.raises(ErasedContent):
        mapper.to_domain_event(stored[1])


def test_an_export_payload_is_the_decoded_state_as_orjson_writes_it() -> None:
    # The export splices the unsealed content into its line as it was sealed instead of
    # parsing it and writing it again: the bytes must be those the parsed state makes.
    at = datetime(2026, 5, 4, 3, 2, 1, tzinfo=UTC)
    conversation = Conversation.start(id=uuid4(), owner="alice", at=at, title='"quoted" ✓', tags=["a", "b"])
    conversation.add_message(
        message_id=uuid4(), at=at, role="agent", content="héllo\n\t✓", metadata={"n": 1.5, "big": 2**62, "x": None}
    )
    conversation.delete(at=at)  # no content at all: sealed as {}
    decoder = Decoder(InMemoryKeyRing())
    events = conversation.collect_events()
    for owner in ("alice", None):  # sealed, and written without a key
        for event in events:
            stored = decoder.mapper.to_stored_event(event, owner)
            timestamp, clear, content, erased = decoder.opened(event.originator_id, stored.originator_version, stored.state)
            state = decoder.mapper.decoded_state(stored)
            assert timestamp == state.pop("timestamp") and not erased and (content is not None) == (owner is not None)
            assert orjson.dumps(payload(clear, content)) == orjson.dumps(state)
    assert orjson.dumps(payload({}, b'{"a":[1]}')) == b'{"a":[1]}'  # an event with no clear field


def test_an_event_stored_before_its_class_version_was_raised_is_upcast_on_reading() -> None:
    from domain.job import Job

    mapper = PydanticMapper(keys=InMemoryKeyRing())
    job_id, at = uuid4(), datetime(2026, 5, 4, tzinfo=UTC)
    question = {"question": "Q?", "options": ["a", "b"], "explanation": "because"}
    current = Job.Generated(
        originator_id=job_id, originator_version=4, timestamp=at, attempt=1, progress=60,
        result={"title": "T", "questions": [{**question, "correct_answer": "b"}]},
    )
    stored = mapper.to_stored_event(current, "alice")
    assert orjson.loads(stored.state)["class_version"] == 2  # kept clear, beside the ids
    assert mapper.to_domain_event(stored) == current

    older = {"timestamp": at.isoformat(), "attempt": 1, "progress": 60,
             "result": {"title": "T", "questions": [{**question, "answer": "b"}]}}
    sealed = mapper._sealed(older, "alice", job_id, 4)  # as the older code sealed it: no class_version
    legacy = StoredEvent(job_id, 4, stored.topic, orjson.dumps(sealed))
    assert mapper.to_domain_event(legacy) == current

    summary = {**older, "result": {"title": "T", "summary": "s", "key_points": ["k"]}}
    legacy_summary = StoredEvent(job_id, 4, stored.topic, orjson.dumps(mapper._sealed(summary, "alice", job_id, 4)))
    assert mapper.to_domain_event(legacy_summary).result == summary["result"]  # not a quiz: as it was
