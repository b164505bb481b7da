"""The history read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from domain.conversation import Conversation
from domain.session import Session
from projections.history import FIRST_MESSAGE_PREVIEW, HistoryProjection, HistoryView, SessionField
from tests.unit.projected import NOW, at, erasure_of, project


class MemoryHistoryView(HistoryView):
    def __init__(self) -> None:
        self.sessions: dict[UUID, dict[str, Any]] = {}
        self.conversations: dict[UUID, dict[str, Any]] = {}
        self.messages: dict[tuple[UUID, int], dict[str, Any]] = {}

    def add_session(
        self, session_id: UUID, owner: str, name: str, description: str, kind: str, tags: list[str], at: datetime
    ) -> None:
        self.sessions[session_id] = {
            "owner": owner, "name": name, "description": description, "kind": kind, "tags": tags, "status": "open",
            "conversation_count": 0, "created_at": at, "updated_at": at,
        }

    def update_session(self, session_id: UUID, field: SessionField, value: Any, at: datetime) -> None:
        self.sessions[session_id].update({field: value, "updated_at": at})

    def add_conversation(
        self, conversation_id: UUID, owner: str, title: str, tags: list[str], session_id: UUID | None,
        document_context: dict[str, Any] | None, embedding_provider: str | None, at: datetime,
    ) -> None:
        self.conversations[conversation_id] = {
            "owner": owner, "title": title, "tags": tags, "session_id": session_id,
            "document_context": document_context, "embedding_provider": embedding_provider, "message_count": 0,
            "first_message": None, "created_at": at, "updated_at": at,
        }

    def count_session_conversations(self, session_id: UUID, added: int) -> None:
        if session_id in self.sessions:
            self.sessions[session_id]["conversation_count"] += added

    def add_message(
        self, conversation_id: UUID, seq: int, message_id: UUID, role: str, content: str, metadata: dict[str, Any],
        pinned: bool, message_type: str, at: datetime,
    ) -> None:
        self.messages[(conversation_id, seq)] = {
            "id": message_id, "role": role, "content": content, "metadata": metadata, "pinned": pinned,
            "message_type": message_type, "created_at": at,
        }

    def count_messages(self, conversation_id: UUID, added: int, preview: str, at: datetime) -> None:
        row = self.conversations[conversation_id]
        row["message_count"] += added
        row["first_message"] = row["first_message"] or preview
        row["updated_at"] = max(row["updated_at"], at)

    def retitle_conversation(self, conversation_id: UUID, title: str, at: datetime) -> None:
        row = self.conversations[conversation_id]
        row.update(title=title, updated_at=max(row["updated_at"], at))

    def retag_conversation(self, conversation_id: UUID, tags: list[str], at: datetime) -> None:
        self.conversations[conversation_id].update(tags=tags, updated_at=at)

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.messages = {key: row for key, row in self.messages.items() if key[0] != conversation_id}
        gone = self.conversations.pop(conversation_id)
        if gone["session_id"] in self.sessions:
            self.sessions[gone["session_id"]]["conversation_count"] -= 1

    def erase_owner(self, owner: str) -> None:
        mine = {i for i, row in self.conversations.items() if row["owner"] == owner}
        self.messages = {key: row for key, row in self.messages.items() if key[0] not in mine}
        self.conversations = {i: row for i, row in self.conversations.items() if i not in mine}
        self.sessions = {i: row for i, row in self.sessions.items() if row["owner"] != owner}


def history() -> tuple[HistoryProjection, MemoryHistoryView]:
    view = MemoryHistoryView()
    return HistoryProjection(view), view


def test_a_session_and_its_changes() -> None:
    projection, view = history()
    session = Session.create(id=uuid4(), owner="alice", at=NOW, name="Trip", tags=["travel"])
    session.update(at=at(1), name="Lisbon trip", description="in May", tags=["travel", "lisbon"])
    session.close(at=at(2))
    project(projection, session)
    assert view.sessions[session.id] == {
        "owner": "alice", "name": "Lisbon trip", "description": "in May", "kind": "general",
        "tags": ["travel", "lisbon"], "status": "closed", "conversation_count": 0, "created_at": NOW,
        "updated_at": at(2),
    }


def test_messages_count_in_their_conversation_which_counts_in_its_session() -> None:
    projection, view = history()
    session = Session.create(id=uuid4(), owner="alice", at=NOW, name="Trip")
    conversation = Conversation.start(id=uuid4(), owner="alice", at=at(1), title="Plans", session_id=session.id)
    long_first = "first " * 100
    conversation.add_message(message_id=uuid4(), at=at(3), role="user", content=long_first, pinned=True)
    conversation.add_message(message_id=uuid4(), at=at(2), role="agent", content="second", metadata={"k": 1})
    project(projection, session, conversation)

    row = view.conversations[conversation.id]
    assert (row["message_count"], row["first_message"]) == (2, long_first[:FIRST_MESSAGE_PREVIEW])
    assert row["updated_at"] == at(3)  # the latest, not the last applied
    assert view.sessions[session.id]["conversation_count"] == 1
    assert [(m["role"], m["content"], m["pinned"], m["metadata"]) for m in view.messages.values()] == [
        ("user", long_first, True, {}), ("agent", "second", False, {"k": 1}),
    ]
    assert sorted(seq for _, seq in view.messages) == [2, 3]  # keyed by the event's version


def test_retitled_retagged_and_deleted() -> None:
    projection, view = history()
    session = Session.create(id=uuid4(), owner="alice", at=NOW, name="Trip")
    kept = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="Old")
    kept.update(at=at(5), title="New", tags=["b", "a"])
    gone = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="Gone", session_id=session.id)
    gone.add_message(message_id=uuid4(), at=at(1), role="user", content="bye")
    gone.delete(at=at(2))
    project(projection, session, kept, gone)
    assert {k: view.conversations[kept.id][k] for k in ("title", "tags", "updated_at")} == {
        "title": "New", "tags": list(kept.tags), "updated_at": at(5),
    }
    assert gone.id not in view.conversations and view.messages == {}
    assert view.sessions[session.id]["conversation_count"] == 0


def test_an_erasure_leaves_nothing_of_the_user() -> None:
    projection, view = history()
    mine = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="Mine")
    mine.add_message(message_id=uuid4(), at=NOW, role="user", content="secret")
    theirs = Conversation.start(id=uuid4(), owner="bob", at=NOW, title="Theirs")
    project(projection, Session.create(id=uuid4(), owner="alice", at=NOW, name="S"), mine, theirs, erasure_of("alice"))
    assert list(view.conversations) == [theirs.id] and view.messages == {} and view.sessions == {}
    assert projection.scrub_due  # the engine vacuums the tables after an erasure
