"""The search and semantic read models' event -> row logic, through in-memory views."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

from adapters.embedding.hashed import HashedNgramEmbedder
from domain.artifact import Artifact
from domain.conversation import Conversation
from projections.search import MAX_INDEXED_DRAFT, DocumentsView, SearchProjection, SearchView
from projections.semantic import SemanticProjection, SemanticView, semantic_version
from services.ports.embedder import MAX_EMBEDDED_CHARS
from tests.unit.projected import NOW, erasure_of, project

PAGE = {"type": "page", "children": []}


class MemoryDocuments(DocumentsView):
    """Documents as text, each with its owner (what either view keeps, before indexing or embedding)."""

    def __init__(self) -> None:
        self.conversations: dict[UUID, dict[str, Any]] = {}
        self.messages: dict[UUID, dict[str, Any]] = {}
        self.artifacts: dict[UUID, dict[str, Any]] = {}

    def _message(self, message_id: UUID, conversation_id: UUID, content: str) -> None:
        if conversation_id in self.conversations:  # (a message joins its conversation for its owner)
            owner = self.conversations[conversation_id]["owner"]
            self.messages[message_id] = {"conversation_id": conversation_id, "owner": owner, "content": content}

    def retitle_conversation(self, conversation_id: UUID, title: str) -> None:
        self.conversations[conversation_id]["title"] = title

    def remove_artifact(self, artifact_id: UUID) -> None:
        self.artifacts.pop(artifact_id, None)

    def delete_conversation(self, conversation_id: UUID) -> None:
        self.conversations.pop(conversation_id, None)
        self.messages = {i: m for i, m in self.messages.items() if m["conversation_id"] != conversation_id}

    def erase_owner(self, owner: str) -> None:
        for table in (self.conversations, self.messages, self.artifacts):
            for key in [k for k, row in table.items() if row["owner"] == owner]:
                del table[key]


class MemorySearchView(MemoryDocuments, SearchView):
    def index_conversation(self, conversation_id: UUID, owner: str, title: str, at: Any) -> None:
        self.conversations[conversation_id] = {"owner": owner, "title": title}

    def index_message(self, message_id: UUID, conversation_id: UUID, content: str, at: Any) -> None:
        self._message(message_id, conversation_id, content)

    def index_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str, at: Any) -> None:
        self.artifacts[artifact_id] = {"owner": owner, "query": query, "draft": draft}


class MemorySemanticView(MemoryDocuments, SemanticView):
    def embed_conversation(self, conversation_id: UUID, owner: str, title: str) -> None:
        self.conversations[conversation_id] = {"owner": owner, "title": title}

    def embed_message(self, message_id: UUID, conversation_id: UUID, content: str) -> None:
        self._message(message_id, conversation_id, content)

    def embed_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str) -> None:
        self.artifacts[artifact_id] = {"owner": owner, "query": query, "draft": draft}


def documents(owner: str, draft: str = "a draft") -> tuple[Conversation, Conversation, Artifact]:
    kept = Conversation.start(id=uuid4(), owner=owner, at=NOW, title="Tulips")
    kept.add_message(message_id=uuid4(), at=NOW, role="user", content="about bulbs")
    kept.update(at=NOW, title="Tulip bulbs")
    deleted = Conversation.start(id=uuid4(), owner=owner, at=NOW, title="Gone")
    deleted.add_message(message_id=uuid4(), at=NOW, role="user", content="soon gone")
    deleted.delete(at=NOW)
    artifact = Artifact.store(id=uuid4(), owner=owner, at=NOW, session_id=uuid4(), parent=None, layout=PAGE,
                              query="bulb guide", draft=draft)
    return kept, deleted, artifact


def test_search_indexes_titles_messages_and_artifacts_and_forgets_the_deleted() -> None:
    view = MemorySearchView()
    kept, _, artifact = documents("alice", draft="x" * (MAX_INDEXED_DRAFT + 10))
    project(SearchProjection(view), *documents("alice")[1:2], kept, artifact)
    assert view.conversations == {kept.id: {"owner": "alice", "title": "Tulip bulbs"}}
    assert [m["content"] for m in view.messages.values()] == ["about bulbs"]
    assert len(view.artifacts[artifact.id]["draft"]) == MAX_INDEXED_DRAFT  # (a tsvector holds at most 1 MB)
    removed = Artifact.store(id=uuid4(), owner="alice", at=NOW, session_id=uuid4(), parent=None, layout=PAGE)
    removed.remove(at=NOW, reason="retention")
    project(SearchProjection(view), removed)
    assert removed.id not in view.artifacts


def test_semantic_embeds_the_same_documents_cut_to_what_is_embedded() -> None:
    view = MemorySemanticView()
    embedder = HashedNgramEmbedder(32)
    projection = SemanticProjection(view, embedder=embedder)
    kept, deleted, artifact = documents("alice", draft="y" * (MAX_EMBEDDED_CHARS + 10))
    long = Conversation.start(id=uuid4(), owner="alice", at=NOW, title="Long")
    long.add_message(message_id=uuid4(), at=NOW, role="user", content="z" * (MAX_EMBEDDED_CHARS + 10))
    project(projection, kept, deleted, artifact, long)
    assert projection.version == semantic_version(embedder)
    assert {c["title"] for c in view.conversations.values()} == {"Tulip bulbs", "Long"}
    assert sorted(len(m["content"]) for m in view.messages.values()) == [len("about bulbs"), MAX_EMBEDDED_CHARS]
    assert len(view.artifacts[artifact.id]["draft"]) == MAX_EMBEDDED_CHARS


def test_an_erasure_leaves_nothing_of_the_user_in_either() -> None:
    for view, projection in (
        (search := MemorySearchView(), SearchProjection(search)),
        (semantic := MemorySemanticView(), SemanticProjection(semantic, embedder=HashedNgramEmbedder(16))),
    ):
        project(projection, *documents("alice"), *documents("bob"), erasure_of("alice"))
        owners = {row["owner"] for table in (view.conversations, view.messages, view.artifacts) for row in table.values()}
        assert owners == {"bob"}
