"""Stats read model: per-user conversation and message counts, dates and tag counts; per
session the live artifacts and the tokens their generation took."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from uuid import UUID

from domain.artifact import Artifact
from domain.conversation import Conversation
from projections.view import Projection, View, handles


class StatsView(View):
    @abstractmethod
    def count_conversations(self, owner: str, added: int) -> None:
        """The user's conversations, counted from zero when the user is new."""

    @abstractmethod
    def add_conversation(self, conversation_id: UUID, owner: str, tags: list[str], at: datetime) -> None:
        """A new conversation with no messages."""

    @abstractmethod
    def count_tag(self, owner: str, tag: str, added: int) -> None:
        """Conversations of the user's with this tag (a count may fall to zero; it stays)."""

    @abstractmethod
    def count_messages(self, conversation_id: UUID, added: int) -> None:
        """Messages of the conversation, and of its owner's."""

    @abstractmethod
    def count_session_artifacts(self, session_id: UUID, owner: str, artifacts: int, tokens: int) -> None:
        """The session's live artifacts and the tokens spent on every one ever stored."""

    @abstractmethod
    def retag_conversation(self, conversation_id: UUID, tags: list[str]) -> None:
        """The conversation's tags replaced, and its owner's tag counts moved from the old to the new."""

    @abstractmethod
    def delete_conversation(self, conversation_id: UUID) -> None:
        """The conversation gone, and counted out of its owner's conversations, messages and tags."""


class StatsProjection(Projection[StatsView]):
    name = "stats"
    version = 3  # 3: tags counted by blind term, their names sealed
    weight = 2

    @handles(Conversation.Started)
    def started(self, e: Conversation.Started) -> None:
        self.view.count_conversations(e.owner, 1)
        self.view.add_conversation(e.originator_id, e.owner, list(e.tags), e.timestamp)
        for tag in e.tags:
            self.view.count_tag(e.owner, tag, 1)

    @handles(Artifact.Stored)
    def artifact_stored(self, e: Artifact.Stored) -> None:
        self.view.count_session_artifacts(e.session_id, e.owner, 1, e.stats.tokens)

    @handles(Artifact.Removed)
    def artifact_removed(self, e: Artifact.Removed) -> None:
        self.view.count_session_artifacts(e.session_id, e.owner, -1, 0)

    @handles(Conversation.MessageAdded)
    def message_added(self, e: Conversation.MessageAdded) -> None:
        self.view.count_messages(e.originator_id, 1)

    @handles(Conversation.Retagged)
    def retagged(self, e: Conversation.Retagged) -> None:
        self.view.retag_conversation(e.originator_id, list(e.tags))

    @handles(Conversation.Deleted)
    def deleted(self, e: Conversation.Deleted) -> None:
        self.view.delete_conversation(e.originator_id)
