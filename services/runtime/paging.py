"""Pages of a list, by offset or by cursor, from one statement shape every list shares.

A list is its filtered rows (`inner`: a SELECT without ORDER BY or LIMIT that also selects
its sort value AS page_key and the row's id AS page_id) in one `Order`. A page is `limit`
of them after `offset` rows, or after the row a cursor names: a token sealed for the caller,
the list and its order (services/runtime/cursors.py) holding that row's sort value and id,
so a page goes on exactly after the last row seen however many rows were added before it
meanwhile (an offset would show some again). `total` counts every row the filters match;
`next_cursor` continues after this page, None on the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.sql import SQL, Composable

from services.ports.read_models import Queries
from services.runtime.cursors import invalid_cursor


@dataclass(frozen=True)
class Order:
    name: str  # the list and its order, e.g. "artifacts" or "conversations:title:asc"
    key_type: str  # page_key's Postgres type, which a cursor's value is cast to
    id_type: str = "uuid"
    descending: bool = True


def paged(order: Order, inner: Composable) -> Composable:
    """The page statement over `inner`; parameters %(after_key)s, %(after_id)s (None for
    the first page), %(limit)s, %(offset)s and the inner query's own."""
    return SQL(
        "SELECT * FROM (SELECT listed.*, count(*) OVER () AS total FROM ({inner}) listed) counted"
        " WHERE %(after_key)s::{key_type} IS NULL"
        " OR (page_key, page_id) {compare} (%(after_key)s::{key_type}, %(after_id)s::{id_type})"
        " ORDER BY page_key {direction}, page_id {direction} LIMIT %(limit)s + 1 OFFSET %(offset)s"
    ).format(
        inner=inner, key_type=SQL(order.key_type), id_type=SQL(order.id_type),
        compare=SQL("<" if order.descending else ">"), direction=SQL("DESC" if order.descending else "ASC"),
    )


async def page_of(
    queries: Queries, user: str, order: Order, inner: Composable, params: dict[str, Any], *, limit: int, offset: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One page of `user`'s list (see the module's docstring), as the contract's Page."""
    after_key, after_id = opened(queries, user, order, cursor) if cursor is not None else (None, None)
    values = {**params, "after_key": after_key, "after_id": after_id, "limit": limit, "offset": offset}
    rows = await queries.fetch_all(paged(order, inner), values, binary=True)  # (sealed columns as bytes, not hex)
    if rows:
        total = rows[0]["total"]
    else:  # past the end: nothing to read the total from
        counted = await queries.fetch_one(SQL("SELECT count(*) AS total FROM ({inner}) listed").format(inner=inner), params)
        total = counted["total"] if counted else 0
    items, more = rows[:limit], len(rows) > limit
    next_cursor = sealed(queries, user, order, items[-1]["page_key"], items[-1]["page_id"]) if more else None
    for row in items:
        del row["page_key"], row["page_id"], row["total"]
    return {"items": items, "total": total, "limit": limit, "offset": offset, "next_cursor": next_cursor}


def as_text(value: Any) -> str:
    """A sort value or id as text Postgres casts back to the same value (a float's repr is
    its shortest exact form)."""
    return value.isoformat() if isinstance(value, datetime) else repr(value) if isinstance(value, float) else str(value)


def sealed(queries: Queries, user: str, order: Order, key: Any, ident: Any) -> str:
    # The id first: neither holds a NUL (Postgres text cannot), so the first one splits them.
    return queries.cursors.seal(user, order.name, f"{as_text(ident)}\x00{as_text(key)}".encode())


def opened(queries: Queries, user: str, order: Order, cursor: str) -> tuple[str, str]:
    """A cursor back to (sort value, id) as text for Postgres to cast; `invalid` naming the
    field when it is not one this service sealed for this user, list and order."""
    ident, separator, key = queries.cursors.open(user, order.name, cursor).decode().partition("\x00")
    if not separator:  # (sealed by us, so never; but never cast a half)
        raise invalid_cursor("cursor", "not a cursor this service gave you for this list and order")
    return key, ident
