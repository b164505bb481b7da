"""The audit read model's event -> row logic, through an in-memory view."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID, uuid4

from domain.artifact import Artifact
from domain.conversation import Conversation
from domain.session import Session
from projections.audit import AuditProjection, AuditView
from tests.unit.projected import NOW, erasure_of, project


class MemoryAuditView(AuditView):
    def __init__(self) -> None:
        self.aggregates: dict[UUID, tuple[str, str]] = {}
        self.links: set[tuple[UUID, UUID, str]] = set()

    def add_aggregate(self, aggregate_id: UUID, aggregate_type: str, owner: str, at: datetime) -> None:
        self.aggregates[aggregate_id] = (aggregate_type, owner)

    def link(self, aggregate_id: UUID, scope_id: UUID, field: str) -> None:
        self.links.add((aggregate_id, scope_id, field))

    def erase_owner(self, owner: str) -> None:
        mine = {i for i, (_, o) in self.aggregates.items() if o == owner}
        self.links = {link for link in self.links if link[0] not in mine}
        self.aggregates = {i: row for i, row in self.aggregates.items() if i not in mine}


def test_every_creation_is_an_aggregate_linked_to_the_ones_it_names() -> None:
    view = MemoryAuditView()
    session = Session.create(id=uuid4(), owner="alice", at=NOW, name="S")
    conversation = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="t", session_id=session.id)
    conversation.add_message(message_id=uuid4(), at=NOW, role="user", content="not a creation")
    artifact = Artifact.store(id=uuid4(), owner="alice", at=NOW, session_id=session.id, parent=None,
                              layout={"type": "page", "children": []})
    project(AuditProjection(view), session, conversation, artifact)
    assert view.aggregates == {
        session.id: ("Session", "alice"), conversation.id: ("Conversation", "alice"), artifact.id: ("Artifact", "alice"),
    }
    assert view.links == {(conversation.id, session.id, "session_id"), (artifact.id, session.id, "session_id")}


def test_an_erasure_leaves_nothing_of_the_user() -> None:
    view = MemoryAuditView()
    bobs = Session.create(id=uuid4(), owner="bob", at=NOW, name="S")
    alices = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="t", session_id=bobs.id)
    project(AuditProjection(view), bobs, alices, erasure_of("alice"))
    assert list(view.aggregates) == [bobs.id] and view.links == set()
