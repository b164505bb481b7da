"""Postgres arrays as statement parameters, each list saying its element type.

psycopg's own list dumper works a list's element type out on every statement: it scans the
list (twice) and builds a dumper for that type, ~4–9 µs a list on these machines, and a
group commit's statement has twelve lists: at one command a group that was the largest
part of the writer thread's CPU. A list made as one of these types names its type, so its
dumper is found by its class and only the values are written (by psycopg's own binary
array code and element dumpers). On a connection where `register` was not called psycopg
dumps them as the lists they are.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

from psycopg.abc import AdaptContext
from psycopg.types.array import ListBinaryDumper


class PgArray(list[Any]):
    """A list of values of one Postgres type (or None)."""

    element_oid: ClassVar[int]
    array_oid: ClassVar[int]


class Uuids(PgArray):
    element_oid, array_oid = 2950, 2951


class Int8s(PgArray):
    element_oid, array_oid = 20, 1016


class Int4s(PgArray):
    element_oid, array_oid = 23, 1007


class Texts(PgArray):
    element_oid, array_oid = 25, 1009


class Byteas(PgArray):
    element_oid, array_oid = 17, 1001


ARRAYS: tuple[type[PgArray], ...] = (Uuids, Int8s, Int4s, Texts, Byteas)


class ArrayDumper(ListBinaryDumper):
    """psycopg's binary list dumper with the element type given by the list's class: its
    dumper is made once (psycopg's own for that type, by oid), and `get_key` and `upgrade`
    skip the search (they do when the array's oid is known)."""

    def __init__(self, cls: type, context: AdaptContext | None = None):
        array = cast(type[PgArray], cls)  # (registered for the PgArray types alone)
        self.element_oid = array.element_oid  # (read by the base class as it finds the element dumper)
        super().__init__(cls, context)
        self.oid = array.array_oid


def register(context: AdaptContext) -> None:
    """Dump these arrays by their class on this connection (or cursor, or adapters map)."""
    for array in ARRAYS:
        context.adapters.register_dumper(array, ArrayDumper)
