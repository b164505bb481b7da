"""Pages of a list, by offset or by cursor, from one statement shape every list shares.

A list is its filtered rows (`inner`: a SELECT without ORDER BY or LIMIT that also selects
its sort value AS page_key and the row's id AS page_id) in one `Order`. A page is `limit`
of them after `offset` rows, or after the row a cursor names: an opaque token holding the
list, its order and that row's sort value and id, so a page goes on exactly after the last
row seen however many rows were added before it meanwhile (an offset would show some
again). `total` counts every row the filters match; `next_cursor` continues after this
page, None on the last.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from chronicle_contract.errors import ChronicleError
from psycopg.sql import SQL, Composable

from services.runtime.read_models import Queries


def _text(value: Any) -> str:
    if not isinstance(value, str) or "\x00" in value:
        raise ValueError("not text")
    return value


def _number(value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError("not a number")
    return float(value)


READ_BACK = {  # a cursor value as each key type must be
    "timestamptz": lambda value: datetime.fromisoformat(_text(value)),
    "uuid": lambda value: UUID(_text(value)),
    "text": _text,
    "double precision": _number,
}


@dataclass(frozen=True)
class Order:
    name: str  # the list and its order, e.g. "artifacts" or "conversations:title:asc"
    key_type: str  # page_key's Postgres type, to read a cursor's value back
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
    queries: Queries, order: Order, inner: Composable, params: dict[str, Any], *, limit: int, offset: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One page of the list (see the module's docstring), as the contract's Page."""
    after_key, after_id = decode(order, cursor) if cursor is not None else (None, None)
    values = {**params, "after_key": after_key, "after_id": after_id, "limit": limit, "offset": offset}
    rows = await queries.fetch_all(paged(order, inner), values)
    if rows:
        total = rows[0]["total"]
    else:  # past the end: nothing to read the total from
        counted = await queries.fetch_one(SQL("SELECT count(*) AS total FROM ({inner}) listed").format(inner=inner), params)
        total = counted["total"] if counted else 0
    items, more = rows[:limit], len(rows) > limit
    next_cursor = encode(order, items[-1]["page_key"], items[-1]["page_id"]) if more else None
    for row in items:
        del row["page_key"], row["page_id"], row["total"]
    return {"items": items, "total": total, "limit": limit, "offset": offset, "next_cursor": next_cursor}


def token(raw: bytes) -> str:
    """Bytes as an opaque cursor (URL-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def untoken(cursor: str) -> bytes:
    """A cursor's bytes; binascii.Error (a ValueError) when it is not one."""
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def invalid_cursor(field: str, message: str) -> ChronicleError:
    return ChronicleError("invalid", message, [{"field": field, "rule": "cursor", "message": message}])


def encode(order: Order, key: Any, ident: Any) -> str:
    return token(orjson.dumps([order.name, key, ident]))


def decode(order: Order, cursor: str) -> tuple[str, str]:
    """A cursor back to (sort value, id) as text for Postgres to cast; `invalid` naming the
    field when it is not one this service gave for this list and order."""
    try:
        name, key, ident = orjson.loads(untoken(cursor))
        if name != order.name:
            raise ValueError(name)
        READ_BACK[order.key_type](key)  # what Postgres could not cast is refused here, as bad input
        READ_BACK[order.id_type](ident)
    except (ValueError, TypeError, KeyError):  # (binascii.Error and orjson's are ValueErrors)
        raise invalid_cursor("cursor", "not a cursor this service gave for this list and order") from None
    return str(key), str(ident)
