"""Audit read model: every aggregate (type, owner) and the aggregates it names, so a
session's or conversation's timeline can gather everything that belongs to it.

It handles the creation event of every aggregate type in `domain/`, found when the
projection is built, so a new aggregate is covered without touching this module: each
UUID field of its creation event ending in `_id` (a session_id, conversation_id,
optimization_id, round_id...) becomes a link to the aggregate it names.
"""

from __future__ import annotations

import importlib
import pkgutil
from abc import abstractmethod
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.utils import get_topic

import domain
from domain.base import Aggregate
from projections.view import Projection, View


def creation_events() -> list[type]:
    """The creation event classes of every aggregate class in the modules of domain/."""
    for module in pkgutil.iter_modules(domain.__path__):
        importlib.import_module(f"domain.{module.name}")
    found: set[type] = set()
    pending = [Aggregate]
    while pending:
        aggregate_class = pending.pop()
        pending.extend(aggregate_class.__subclasses__())
        # The class's own attributes: eventsourcing re-creates nested event classes on
        # subclassing, and only the ones the class holds are the registered ones.
        found.update(
            value
            for value in vars(aggregate_class).values()
            if isinstance(value, type) and issubclass(value, Aggregate.Created) and value is not Aggregate.Created
        )
    return sorted(found, key=get_topic)


class AuditView(View):
    @abstractmethod
    def add_aggregate(self, aggregate_id: UUID, aggregate_type: str, owner: str, at: datetime) -> None: ...

    @abstractmethod
    def link(self, aggregate_id: UUID, scope_id: UUID, field: str) -> None:
        """The aggregate names `scope_id` in its creation event's `field`."""


class AuditProjection(Projection[AuditView]):
    name = "audit"
    version = 1

    @classmethod
    def topics(cls) -> list[str]:
        return [get_topic(event_class) for event_class in creation_events()] + cls.erasure_topics()

    def apply(self, event: Any, position: int) -> None:
        if self.erase(event) or not isinstance(event, Aggregate.Created):
            return
        aggregate_type = event.originator_topic.rpartition(":")[2]
        self.view.add_aggregate(event.originator_id, aggregate_type, event.owner, event.timestamp)
        for field, value in event:
            if field.endswith("_id") and field != "originator_id" and isinstance(value, UUID):
                self.view.link(event.originator_id, value, field)
