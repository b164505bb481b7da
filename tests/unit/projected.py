"""What the read models' unit tests share: events run through a projection as the engine runs them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from eventsourcing.utils import get_topic

from domain.base import Aggregate
from domain.erasure import DataSubject
from projections.view import Projection

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def project(projection: Projection[Any], *sources: Aggregate | list[Any]) -> None:
    """The pending events of these aggregates (or these lists of events), in order, through
    the projection: only those of the topics it names, each at the next log position."""
    topics = set(projection.topics())
    events = [e for s in sources for e in (s.collect_events() if isinstance(s, Aggregate) else s)]
    for position, event in enumerate(events, start=1):
        if get_topic(type(event)) in topics:
            projection.apply(event, position)


def erasure_of(user_id: str) -> list[Any]:
    """The event of a user's erasure (without the subject's registration before it)."""
    subject = DataSubject.register(user_id=user_id, at=NOW)
    subject.erase(at=NOW, requested_by="operator")
    return [e for e in subject.collect_events() if isinstance(e, DataSubject.Erased)]
