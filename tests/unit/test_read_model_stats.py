"""The stats read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from domain.conversation import Conversation
from projections.stats import StatsProjection, StatsView
from tests.unit.projected import NOW, erasure_of, project


class MemoryStatsView(StatsView):
    def __init__(self) -> None:
        self.users: dict[str, dict[str, int]] = {}
        self.conversations: dict[UUID, dict[str, Any]] = {}
        self.tags: Counter[tuple[str, str]] = Counter()
        self.sessions: dict[UUID, dict[str, Any]] = {}

    def _user(self, owner: str) -> dict[str, int]:
        return self.users.setdefault(owner, {"conversations": 0, "messages": 0})

    def count_conversations(self, owner: str, added: int) -> None:
        self._user(owner)["conversations"] += added

    def add_conversation(self, conversation_id: UUID, owner: str, tags: list[str], at: datetime) -> None:
        self.conversations[conversation_id] = {"owner": owner, "tags": tags, "message_count": 0, "created_at": at}

    def count_tag(self, owner: str, tag: str, added: int) -> None:
        self.tags[(owner, tag)] += added

    def count_messages(self, conversation_id: UUID, added: int) -> None:
        row = self.conversations[conversation_id]
        row["message_count"] += added
        self._user(row["owner"])["messages"] += added

    def count_session_artifacts(self, session_id: UUID, owner: str, artifacts: int, tokens: int) -> None:
        row = self.sessions.setdefault(session_id, {"owner": owner, "artifact_count": 0, "total_tokens": 0})
        row["artifact_count"] += artifacts
        row["total_tokens"] += tokens

    def retag_conversation(self, conversation_id: UUID, tags: list[str]) -> None:
        row = self.conversations[conversation_id]
        for tag in row["tags"]:
            self.tags[(row["owner"], tag)] -= 1
        for tag in tags:
            self.tags[(row["owner"], tag)] += 1
        row["tags"] = tags

    def delete_conversation(self, conversation_id: UUID) -> None:
        gone = self.conversations.pop(conversation_id)
        user = self.users[gone["owner"]]
        user["conversations"] -= 1
        user["messages"] -= gone["message_count"]
        for tag in gone["tags"]:
            self.tags[(gone["owner"], tag)] -= 1

    def erase_owner(self, owner: str) -> None:
        self.users.pop(owner, None)
        self.conversations = {i: r for i, r in self.conversations.items() if r["owner"] != owner}
        self.tags = Counter({k: n for k, n in self.tags.items() if k[0] != owner})
        self.sessions = {i: r for i, r in self.sessions.items() if r["owner"] != owner}


def stats() -> tuple[StatsProjection, MemoryStatsView]:
    view = MemoryStatsView()
    return StatsProjection(view), view


def conversation(owner: str, *messages: str, tags: tuple[str, ...] = ()) -> Conversation:
    started = Conversation.start(id=uuid4(), owner=owner, at=NOW, title="t", tags=tags)
    for content in messages:
        started.add_message(message_id=uuid4(), at=NOW, role="user", content=content)
    return started


def test_counts_per_user_conversation_and_tag() -> None:
    projection, view = stats()
    first = conversation("alice", "a", "b", tags=("work", "urgent"))
    second = conversation("alice", "c", tags=("work",))
    project(projection, first, second, conversation("bob", "d"))
    assert view.users == {"alice": {"conversations": 2, "messages": 3}, "bob": {"conversations": 1, "messages": 1}}
    assert view.conversations[first.id]["message_count"] == 2
    assert dict(view.tags) == {("alice", "work"): 2, ("alice", "urgent"): 1}


def test_retagging_and_deleting_move_the_counts() -> None:
    projection, view = stats()
    retagged = conversation("alice", tags=("work",))
    retagged.update(at=NOW, tags=["home"])
    deleted = conversation("alice", "x", "y", tags=("home",))
    deleted.delete(at=NOW)
    project(projection, retagged, deleted)
    assert view.users["alice"] == {"conversations": 1, "messages": 0}
    assert dict(view.tags) == {("alice", "work"): 0, ("alice", "home"): 1}  # a count falls to zero, and stays


def test_an_erasure_leaves_nothing_of_the_user() -> None:
    projection, view = stats()
    project(projection, conversation("alice", "x", tags=("t",)), conversation("bob", "y"), erasure_of("alice"))
    assert list(view.users) == ["bob"] and not any(owner == "alice" for owner, _ in view.tags)
    assert [r["owner"] for r in view.conversations.values()] == ["bob"]
