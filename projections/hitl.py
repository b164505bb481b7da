"""HITL read model: every checkpoint of every run, for hitl.get, hitl.list and expiry."""

from __future__ import annotations

from abc import abstractmethod
from datetime import datetime
from typing import Any
from uuid import UUID

from domain.conversation import Conversation
from domain.hitl import HitlExpired, HitlPaused, HitlResumed
from projections.view import Projection, View, handles


class HitlView(View):
    @abstractmethod
    def add_conversation(self, conversation_id: UUID, owner: str) -> None:
        """A conversation whose runs may pause (its owner owns them)."""

    @abstractmethod
    def pause(
        self, conversation_id: UUID, run_id: str, seq: int, step: str, checkpoint_type: str, prompt: str,
        data: dict[str, Any], conversation_mode: bool, at: datetime, expires_at: datetime | None,
    ) -> None:
        """A paused checkpoint of a run in a known conversation (none in an unknown one)."""

    @abstractmethod
    def resume(
        self, conversation_id: UUID, run_id: str, approved: bool, edits: Any, feedback: str | None, at: datetime
    ) -> None:
        """The run's latest checkpoint resumed with this answer."""

    @abstractmethod
    def expire(self, conversation_id: UUID, run_id: str, at: datetime) -> None:
        """The run's latest checkpoint expired."""

    @abstractmethod
    def delete_conversation(self, conversation_id: UUID) -> None:
        """The conversation and its checkpoints gone."""


class HitlProjection(Projection[HitlView]):
    name = "hitl"
    version = 3  # 2: a run is its owner's (checkpoints keyed by conversation, run id and seq); 3: content sealed

    @handles(Conversation.Started)
    def started(self, e: Conversation.Started) -> None:
        self.view.add_conversation(e.originator_id, e.owner)

    @handles(HitlPaused)
    def paused(self, e: HitlPaused) -> None:
        self.view.pause(
            e.originator_id, e.run_id, e.originator_version, e.step, e.checkpoint_type, e.prompt, e.data,
            e.conversation_mode, e.timestamp, e.expires_at,
        )

    @handles(HitlResumed)
    def resumed(self, e: HitlResumed) -> None:
        self.view.resume(e.originator_id, e.run_id, e.approved, e.edits, e.feedback, e.timestamp)

    @handles(HitlExpired)
    def expired(self, e: HitlExpired) -> None:
        self.view.expire(e.originator_id, e.run_id, e.timestamp)

    @handles(Conversation.Deleted)
    def deleted(self, e: Conversation.Deleted) -> None:
        self.view.delete_conversation(e.originator_id)
