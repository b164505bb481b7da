"""Search read model: full text over message content, conversation titles, and artifacts'
queries (weighted higher) and drafts; and what it shares with the semantic read model."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import TypeVar
from uuid import UUID

from domain.artifact import Artifact
from domain.conversation import Conversation
from projections.view import Projection, View, handles

# A document is indexed up to this many characters of a draft (a tsvector holds at most 1 MB).
MAX_INDEXED_DRAFT = 200_000


class DocumentsView(View):
    """What the search read model and the semantic one (projections/semantic.py) share:
    conversations, messages and artifacts, each with its owner, gone when its conversation
    is deleted, its artifact removed or its owner erased."""

    @abstractmethod
    def remove_artifact(self, artifact_id: UUID) -> None: ...

    @abstractmethod
    def delete_conversation(self, conversation_id: UUID) -> None:
        """The conversation and its messages gone."""


Documents = TypeVar("Documents", bound=DocumentsView)


class DocumentsProjection(Projection[Documents]):
    @handles(Artifact.Removed)
    def artifact_removed(self, e: Artifact.Removed) -> None:
        self.view.remove_artifact(e.originator_id)

    @handles(Conversation.Deleted)
    def deleted(self, e: Conversation.Deleted) -> None:
        self.view.delete_conversation(e.originator_id)


class SearchView(DocumentsView):
    @abstractmethod
    def index_conversation(self, conversation_id: UUID, owner: str, title: str, at: datetime) -> None: ...

    @abstractmethod
    def retitle_conversation(self, conversation_id: UUID, title: str) -> None: ...

    @abstractmethod
    def index_message(self, message_id: UUID, conversation_id: UUID, content: str, at: datetime) -> None:
        """A message of a conversation indexed before it, under that conversation's owner."""

    @abstractmethod
    def index_artifact(self, artifact_id: UUID, owner: str, query: str, draft: str, at: datetime) -> None:
        """The query ranks above the draft."""


class SearchProjection(DocumentsProjection[SearchView]):
    name = "search"
    version = 7  # 7: blind terms and sealed texts
    weight = 6  # (twice history's: each message's lexemes, blind terms and sealed text)

    @handles(Conversation.Started)
    def started(self, e: Conversation.Started) -> None:
        self.view.index_conversation(e.originator_id, e.owner, e.title, e.timestamp)

    @handles(Conversation.Retitled)
    def retitled(self, e: Conversation.Retitled) -> None:
        self.view.retitle_conversation(e.originator_id, e.title)

    @handles(Conversation.MessageAdded)
    def message_added(self, e: Conversation.MessageAdded) -> None:
        self.view.index_message(e.message_id, e.originator_id, e.content, e.timestamp)

    @handles(Artifact.Stored)
    def artifact_stored(self, e: Artifact.Stored) -> None:
        self.view.index_artifact(e.originator_id, e.owner, e.query, e.draft[:MAX_INDEXED_DRAFT], e.timestamp)
