"""The Projection base: a read model's tables and one handler per event type it cares about."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any, ClassVar

from eventsourcing.utils import get_topic
from psycopg.sql import SQL, Composed, Identifier

from domain.erasure import DataSubject
from projections.batch import Batch, Rows, Totals

EventHandler = Callable[[Any, Batch, Any, int], None]


def handles(event_class: type) -> Callable[[EventHandler], EventHandler]:
    """Mark a projection method as the handler of one event type."""

    def mark(method: EventHandler) -> EventHandler:
        method.handled_event = event_class  # type: ignore[attr-defined]
        return method

    return mark


class Projection:
    """Subclasses set `name`, `version` and `tables` (DDL with a {schema} placeholder).

    A projection owns the tables in its schema and nothing else. Bumping `version`
    makes the engine rebuild the read model from the first event.
    """

    name: ClassVar[str]
    version: int  # set by the class; an instance may refine it (projections/semantic.py)
    tables: str
    # Statements (";"-separated, parameter %(owner)s) that drop one user's rows when the
    # user is erased; every read model holding user data declares them.
    erasure: ClassVar[str] = ""
    # How much work an event costs this read model, roughly: the engine shares the
    # projections out over its threads by it.
    weight: ClassVar[int] = 1
    # Followed by a thread of its own rather than sharing one: for a read model that waits
    # on something outside Postgres (an embeddings endpoint), whose delays and failures must
    # not hold the others back.
    isolated: ClassVar[bool] = False
    # Failures that say nothing about the event (a service it waits on is away): the batch is
    # retried as it is. Any other failure the engine traces to one event, which it parks.
    transient_errors: ClassVar[tuple[type[Exception], ...]] = ()
    handlers: ClassVar[dict[type, EventHandler]]

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.handlers = {  # a subclass keeps its bases' handlers (and may replace them)
            member.handled_event: member
            for klass in reversed(cls.__mro__)
            for member in vars(klass).values()
            if callable(member) and hasattr(member, "handled_event")
        }

    def __init__(self, schema: str | None = None, **options: Any):
        self.schema = schema or self.live_schema()
        self.options = options
        self.sinks: list[Rows | Totals] = []  # subclasses list theirs in write order
        # Set when an erasure deleted rows: the engine then vacuums this read model, so that
        # no dead row version keeps the erased user's content (projections/engine.py Janitor).
        self.scrub_due = False

    def batch(self, cursor: Any) -> Batch:
        return Batch(cursor, self.sinks)

    @classmethod
    def live_schema(cls) -> str:
        return f"rm_{cls.name}"

    @classmethod
    def topics(cls) -> list[str]:
        return [get_topic(event_class) for event_class in cls.handlers] + cls.erasure_topics()

    @classmethod
    def erasure_topics(cls) -> list[str]:
        return [get_topic(DataSubject.Erased)] if cls.erasure else []

    def erase(self, batch: Batch, event: Any) -> bool:
        """Drop an erased user's rows; False if the event is not an erasure."""
        if not (self.erasure and isinstance(event, DataSubject.Erased)):
            return False
        self.scrub_due = True
        for statement in self.erasure.split(";"):
            if statement.strip():
                batch.execute(self.sql(statement), {"owner": event.user_id})
        return True

    def sql(self, text: str, **names: str) -> Composed:
        """A statement with its schema (and any other named identifiers) filled in, cached."""
        return _compose(text, self.schema, tuple(sorted(names.items())))

    def copier(self, table: str, columns: str) -> Callable[[Any, list[tuple[Any, ...]]], None]:
        """A Rows writer that COPYs a batch's rows into `table` ("{schema}.name")."""
        statement = f"COPY {table} ({columns}) FROM STDIN"

        def copy_rows(cursor: Any, rows: list[tuple[Any, ...]]) -> None:
            with cursor.copy(self.sql(statement)) as copy:
                for row in rows:
                    copy.write_row(row)

        return copy_rows

    def create_statements(self, deferred: bool | None = None) -> list[Composed]:
        """The DDL; `deferred=False` leaves out the bulk (GIN) indexes, `True` gives only
        those, so a rebuild can build them once after loading instead of row by row."""
        statements = [s for s in self.tables.split(";") if s.strip()]
        if deferred is not None:
            statements = [s for s in statements if ("USING gin" in s) == deferred]
        return [self.sql(statement) for statement in statements]

    def apply(self, batch: Batch, event: Any, position: int) -> None:
        handler = self.handlers.get(type(event))
        if handler is not None:
            handler(self, batch, event, position)
        else:
            self.erase(batch, event)


@cache
def _compose(text: str, schema: str, names: tuple[tuple[str, str], ...]) -> Composed:
    identifiers = {key: Identifier(value) for key, value in names}
    return SQL(text).format(schema=Identifier(schema), **identifiers)
