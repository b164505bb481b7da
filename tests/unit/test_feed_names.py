"""Every event the domain can record has a name on the event feed: `<aggregate>.<event>`,
both parts non-empty, so its subject is one a NATS server accepts and a filter such as
`conversation.*` finds it with the rest of its aggregate's events."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from chronicle_contract.events import event_subject, feed_names
from eventsourcing.utils import get_topic, resolve_topic

import adapters.store.mapper  # noqa: F401  (registers the renamed events' stored names)
import domain
from domain.base import Aggregate, DomainEvent, event_type_name
from domain.hitl import HitlPaused
from domain.optimization import OptimizationBegun

MODULES = [importlib.import_module(f"domain.{m.name}") for m in pkgutil.iter_modules(domain.__path__)]


def classes_of(kind: type) -> list[type]:
    """The domain's classes of `kind`, as its modules and classes name them (a walk over
    `__subclasses__` would also meet the classes eventsourcing's metaclass replaced)."""
    found: dict[str, type] = {}

    def visit(cls: type) -> None:
        for member in vars(cls).values():
            if inspect.isclass(member) and member.__module__.startswith("domain."):
                if issubclass(member, kind) and member is not kind:
                    found[f"{member.__module__}:{member.__qualname__}"] = member
                if member.__qualname__.startswith(cls.__qualname__ + "."):  # nested in it: look inside
                    visit(member)

    for module in MODULES:
        for member in vars(module).values():
            if inspect.isclass(member) and member.__module__ == module.__name__:
                if issubclass(member, kind) and member is not kind:
                    found[f"{member.__module__}:{member.__qualname__}"] = member
                visit(member)
    return list(found.values())


def feed_type(cls: type[DomainEvent]) -> str:
    topic = get_topic(cls)
    assert resolve_topic(topic) is cls  # the log's reader finds the class again
    return event_type_name(cls, topic.partition(":")[2])


def test_every_recorded_event_has_an_aggregate_and_an_event_name() -> None:
    aggregates = {cls.__name__ for cls in classes_of(Aggregate)}
    events = [cls for cls in classes_of(Aggregate.Event) if cls is not Aggregate.Created]
    assert len(events) > 40  # (the walk found the domain's events)
    for cls in events:
        aggregate, event = feed_names(feed_type(cls))
        assert aggregate and event, cls
        assert feed_type(cls).partition(".")[0] in aggregates, cls
        assert all(event_subject("chronicle", feed_type(cls)).split(".")), cls


def test_events_defined_beside_a_mixin_are_named_by_the_aggregate_they_are_recorded_on() -> None:
    assert event_subject("chronicle", feed_type(HitlPaused)) == "chronicle.events.conversation.hitl_paused"
    assert feed_type(OptimizationBegun) == "Session.OptimizationStarted"  # (its stored name)
