"""The live projection engine: every read model follows the log batch by batch, and one
that cannot apply an event holds back only itself, whether its Python or its SQL fails."""

from __future__ import annotations

import uuid
from abc import abstractmethod
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import pytest

from adapters.read_side.batch import Rows
from adapters.read_side.engine import ProjectionEngine
from adapters.read_side.view import PostgresView, ReadModel
from adapters.store.event_store import EventStore
from adapters.store.mapper import PydanticMapper
from adapters.store.postgres import PostgresTarget
from domain.session import Session
from projections.view import Projection, View, handles
from tests.waiting import wait_until

OWNER = "engine-test"


class NamesView(View):
    @abstractmethod
    def add_name(self, session_id: UUID, name: str, at: datetime) -> None: ...


class Names(Projection[NamesView]):
    """Each session's name."""

    name = "test_names"
    version = 1
    erases = False

    @handles(Session.Created)
    def created(self, e: Session.Created) -> None:
        self.view.add_name(e.originator_id, e.name, e.timestamp)


class PostgresNamesView(PostgresView, NamesView):
    """Stored through a copier."""

    tables = "CREATE TABLE {schema}.names (id uuid PRIMARY KEY, name text NOT NULL, at timestamptz NOT NULL)"

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.names = Rows(self.copier("{schema}.names", "id, name, at"))
        self.sinks = [self.names]

    def add_name(self, session_id: UUID, name: str, at: datetime) -> None:
        self.batch.append(self.names, (session_id, name, at))


class NamesFailingInPython(Names):
    name = "test_names_python"

    @handles(Session.Created)
    def created(self, e: Session.Created) -> None:
        if e.name == "refused":
            raise ValueError("this projection cannot apply this event")
        super().created(e)


class NamesFailingInSql(Names):
    name = "test_names_sql"


class RefusingNamesView(PostgresNamesView):
    tables = (
        "CREATE TABLE {schema}.names (id uuid PRIMARY KEY, name text NOT NULL CHECK (name <> 'refused'),"
        " at timestamptz NOT NULL)"
    )


READ_MODELS = [
    ReadModel(Names, PostgresNamesView),
    ReadModel(NamesFailingInPython, PostgresNamesView),
    ReadModel(NamesFailingInSql, RefusingNamesView),
]


def record_session(store: EventStore, name: str) -> int:
    """One session created, in a commit of its own (as a command would); its log position."""
    session = Session.create(id=uuid.uuid4(), owner=OWNER, at=datetime.now(UTC), name=name)
    mapper = PydanticMapper()
    return store.recorder.record([mapper.to_stored_event(e) for e in session.collect_events()])[-1]



@pytest.fixture
def engine(target: PostgresTarget) -> Iterator[ProjectionEngine]:
    running = ProjectionEngine(
        target, READ_MODELS, batch_size=500, vacuum_every=0, threads=1
    )
    running.start()
    assert running.wait_prepared(30)
    yield running
    running.stop()


def names_in(target: PostgresTarget, projection: type[Projection[Any]]) -> list[str]:
    with target.connect() as conn:
        rows = conn.execute(f"SELECT name FROM rm_{projection.name}.names ORDER BY at").fetchall()
    return [row[0] for row in rows]


def position_of(target: PostgresTarget, projection: type[Projection[Any]]) -> int:
    with target.connect() as conn:
        row = conn.execute("SELECT position FROM chronicle.projections WHERE name = %s", (projection.name,)).fetchone()
    return row[0] if row else -1


def test_live_batches_reach_every_read_model_and_an_event_one_cannot_apply_is_parked(
    target: PostgresTarget, store: EventStore, engine: ProjectionEngine
) -> None:
    first = record_session(store, "first")
    wait_until(lambda: all(position_of(target, p) >= first for p in (Names, NamesFailingInPython, NamesFailingInSql)),
             "the first live batch")
    refused = record_session(store, "refused")
    last = record_session(store, "last")

    wait_until(lambda: position_of(target, Names) >= last, "the healthy read model to pass the refused event")
    assert names_in(target, Names) == ["first", "refused", "last"]
    for failing in (NamesFailingInPython, NamesFailingInSql):
        # The event it cannot apply (in Python, or refused by the database) is set aside,
        # and what comes after it is applied.
        def past_it(projection: type[Projection] = failing) -> bool:
            return position_of(target, projection) >= last

        wait_until(past_it, f"{failing.name} to go past it")
        assert names_in(target, failing) == ["first", "last"]
    with target.connect() as conn:
        set_aside = conn.execute("SELECT consumer, position, error FROM chronicle.parked ORDER BY consumer").fetchall()
    assert set_aside == [
        ("test_names_python", refused, "ValueError"),
        ("test_names_sql", refused, "CheckViolation (SQLSTATE 23514)"),
    ]


def test_a_tail_behind_catches_up_in_long_batches_and_then_follows_live(
    target: PostgresTarget, store: EventStore
) -> None:
    def engine() -> ProjectionEngine:
        return ProjectionEngine(target, READ_MODELS[:1], batch_size=500, vacuum_every=0, threads=1)

    first = engine()  # builds the read model, then stops
    first.start()
    assert first.wait_prepared(30)
    first.stop()
    behind = [record_session(store, f"early {n}") for n in range(1200)]  # more than two batches of 500
    second = engine()
    second.start()
    try:
        wait_until(lambda: position_of(target, Names) >= behind[-1], "the catch-up", timeout=60)
        live = [record_session(store, f"live {n}") for n in range(3)]
        wait_until(lambda: position_of(target, Names) >= live[-1], "the live batches")
    finally:
        second.stop()
    assert names_in(target, Names) == [f"early {n}" for n in range(1200)] + [f"live {n}" for n in range(3)]
