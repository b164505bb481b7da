"""Domain events renamed in code keep the name they are stored under: events stored before
the rename still load and project, and new ones are stored, audited and fed out as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from eventsourcing.persistence import StoredEvent

from adapters.store.mapper import PydanticMapper
from domain.optimization import OptimizationBegun, OptimizationEnded
from projections.optimizations import OptimizationsProjection
from tests.unit.projected import at
from tests.unit.test_read_model_optimizations import MemoryOptimizationsView, Run

ROOT = Path(__file__).resolve().parents[2]
# The topics these events were stored under when their classes were OptimizationStarted and
# OptimizationStopped (the names the contract's replies have).
STARTED_TOPIC = "domain.optimization:OptimizationStarted"
STOPPED_TOPIC = "domain.optimization:OptimizationStopped"


def stored_optimization() -> list[StoredEvent]:
    """An optimization's events, started, with a round, and stopped, as the event store holds them."""
    run = Run()
    run.round(0)
    run.session.stop_optimization(at=at(2), reason="budget")
    mapper = PydanticMapper()
    return [mapper.to_stored_event(e) for e in [*run.events, *run.session.collect_events()]]


def test_new_events_are_stored_under_the_names_stored_events_have() -> None:
    topics = [e.topic for e in stored_optimization()]
    # What audit.stream and the event feed name them by.
    assert (topics[1], topics[-1]) == (STARTED_TOPIC, STOPPED_TOPIC)


def test_an_event_stored_under_the_old_name_loads_in_a_process_that_wrote_none() -> None:
    # A fresh interpreter: nothing has asked for the renamed classes' topics yet, as in a
    # projection process or an operator's command that only reads the log.
    stored = stored_optimization()[1]
    script = (
        "import sys, uuid\n"
        "from eventsourcing.persistence import StoredEvent\n"
        "from adapters.store.mapper import PydanticMapper\n"
        "event = PydanticMapper().to_domain_event(StoredEvent(uuid.UUID(sys.argv[1]), 2, sys.argv[2], bytes.fromhex(sys.argv[3])))\n"
        "print(type(event).__qualname__, event.optimizer)\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", script, str(stored.originator_id), STARTED_TOPIC, stored.state.hex()],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    assert loaded.stdout.split() == ["OptimizationBegun", "evo"]


def test_events_stored_under_the_old_names_project_into_the_optimizations_read_model() -> None:
    mapper = PydanticMapper()
    stored = stored_optimization()
    view = MemoryOptimizationsView()
    projection = OptimizationsProjection(view)
    assert {STARTED_TOPIC, STOPPED_TOPIC} <= set(projection.topics())  # the engine's filter takes them
    events = [mapper.to_domain_event(StoredEvent(e.originator_id, e.originator_version, e.topic, e.state)) for e in stored]
    assert (type(events[1]), type(events[-1])) == (OptimizationBegun, OptimizationEnded)
    for position, event in enumerate(events, start=1):
        projection.apply(event, position)
    [summary] = view.optimizations.values()
    assert (summary["optimizer"], summary["stopped"], summary["stop_reason"]) == ("evo", True, "budget")
