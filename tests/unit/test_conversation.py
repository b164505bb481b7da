"""The Conversation aggregate's rules, without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from domain.conversation import DERIVED_TITLE_MAX, Conversation, derive_title
from domain.errors import InvalidCommand, NotFound

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def started(**fields: object) -> Conversation:
    return Conversation.start(id=uuid4(), owner="alice", at=NOW, **fields)  # type: ignore[arg-type]


def test_first_user_message_names_an_untitled_conversation() -> None:
    conversation = started()
    conversation.add_message(message_id=uuid4(), at=NOW, role="system", content="You are helpful.")
    assert conversation.title == ""
    conversation.add_message(message_id=uuid4(), at=NOW, role="user", content="  Plan   a trip\nto Lisbon ")
    assert conversation.title == "Plan a trip to Lisbon"
    conversation.add_message(message_id=uuid4(), at=NOW, role="user", content="Something else")
    assert conversation.title == "Plan a trip to Lisbon"
    kinds = [type(e).__name__ for e in conversation.collect_events()]
    assert kinds == ["Started", "MessageAdded", "MessageAdded", "Retitled", "MessageAdded"]


def test_a_given_title_is_kept() -> None:
    conversation = started(title="Chosen")
    conversation.add_message(message_id=uuid4(), at=NOW, role="user", content="hello")
    assert conversation.title == "Chosen"


def test_derived_titles_are_short_and_cut_at_a_word() -> None:
    title = derive_title("word " * 40)
    assert len(title) <= DERIVED_TITLE_MAX
    assert title.endswith("…")
    assert not title[:-1].endswith(" ")
    assert derive_title("x" * 80) == "x" * (DERIVED_TITLE_MAX - 1) + "…"


@pytest.mark.parametrize("content", ["", "   ", "x" * 10_001])
def test_message_content_limits(content: str) -> None:
    conversation = started()
    conversation.collect_events()
    with pytest.raises(InvalidCommand) as raised:
        conversation.add_message(message_id=uuid4(), at=NOW, role="user", content=content)
    assert raised.value.field == "content"
    assert conversation.collect_events() == []
    assert conversation.message_count == 0


def test_tag_limits() -> None:
    with pytest.raises(InvalidCommand) as raised:
        started(tags=[f"t{i}" for i in range(11)])
    assert (raised.value.field, raised.value.rule) == ("tags", "max_items")
    with pytest.raises(InvalidCommand):
        started(tags=["x" * 51])
    assert started(tags=["a", "a", "b"]).tags == ("a", "b")


def test_deleted_or_foreign_conversations_are_not_found() -> None:
    conversation = started()
    with pytest.raises(NotFound):
        conversation.check_visible_to("mallory")
    conversation.delete(at=NOW + timedelta(seconds=1))
    with pytest.raises(NotFound):
        conversation.check_visible_to("alice")


def test_update_records_only_changes() -> None:
    conversation = started(title="A", tags=["x"])
    conversation.collect_events()
    conversation.update(at=NOW, title="A", tags=["x"])
    assert conversation.collect_events() == []
    conversation.update(at=NOW, title="B", tags=["y"])
    assert [type(e).__name__ for e in conversation.collect_events()] == ["Retitled", "Retagged"]


def test_event_times_never_go_backwards() -> None:
    conversation = started()
    conversation.add_message(message_id=uuid4(), at=NOW - timedelta(minutes=5), role="user", content="late clock")
    times = [e.timestamp for e in conversation.collect_events()]
    assert times == sorted(times)
    assert times[-1] == NOW
