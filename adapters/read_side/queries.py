"""The read-model reader every query handler uses (services/ports/read_models.py), on Postgres: a pool of autocommit connections, rows as dicts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
import psycopg
from chronicle_contract.errors import ChronicleError
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from adapters.store.reachability import Reachability, answers_off_loop
from services.ports.embedder import EmbeddingFailed, vector_literal
from services.ports.read_models import Cursors, Queries, SemanticSearch
from services.ports.sealing import Sealing

log = logging.getLogger(__name__)

Rows = TypeVar("Rows")  # what a read returns: its statements' rows, as dicts or tuples

TSQUERY = "SELECT websearch_to_tsquery(%s::regconfig, %s)::text AS words"
MAX_KEPT_TSQUERIES = 10_000


async def configure_reader(conn: psycopg.AsyncConnection) -> None:
    """Each query connection, once opened."""
    # jsonb turns a float like 1e20 into the integer 100000000000000000000, which the
    # orjson reply encoder refuses; orjson's own parser reads it back as the float it was.
    set_json_loads(orjson.loads, conn)
    # Timestamps in UTC whatever the server's TimeZone: every reply says +00:00, and
    # psycopg gives them datetime.UTC, where a zone (even "Etc/UTC") is a
    # ZoneInfo whose conversion costs ~0.3 µs more a value (30 µs a get of 100 messages).
    await conn.execute("SET TIME ZONE 'UTC'")


@contextlib.asynccontextmanager
async def opened_queries(url: str, cursors: Cursors, sealing: Sealing) -> AsyncIterator[PostgresQueries]:
    """A reader of its own, on a pool of one connection (an operator's report)."""
    async with query_pool(url) as pool:
        yield PostgresQueries(pool, cursors=cursors, sealing=sealing)


def query_pool(
    url: str | Callable[[], str], *, min_size: int = 1, max_size: int = 1, application_name: str = "chronicle-queries"
) -> AsyncConnectionPool:
    """The connections `Queries` reads through (open it before use). In autocommit: every
    read is one statement, and in a transaction each took three round trips (BEGIN, the
    query, the COMMIT as the pool took it back; a small query's p50 0.39 -> 0.19 ms).
    Named, so that an operator sees in pg_stat_activity which server serves queries."""
    return AsyncConnectionPool(
        url, min_size=min_size, max_size=max_size, open=False,
        kwargs={"autocommit": True, "application_name": application_name}, configure=configure_reader,
    )


class PostgresQueries(Queries):
    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        cursors: Cursors,
        sealing: Sealing,
        language: str = "english",
        reachability: Reachability | None = None,
        semantic: SemanticSearch | None = None,
    ):
        self.pool = pool
        self.language = language
        # What seals the cursors pages hand out: the service's shared key, so that every
        # instance opens every other's (a key of this process alone for one-off reports).
        self.cursors = cursors
        self.sealing = sealing  # opens what the projections sealed under each owner's key
        self._tsqueries: dict[str, str] = {}
        self.reachability = reachability  # whether the server read from answers (the event store's, on the primary)
        self.semantic = semantic  # None: the semantic read model is not kept, search is full text only

    async def tsquery(self, words: str) -> str:
        """Kept for the next search of the same words (a round trip less): the answer depends
        on nothing but the words and the language's dictionaries."""
        known = self._tsqueries.get(words)
        if known is None:
            row = await self.fetch_one(TSQUERY, (self.language, words))
            known = row["words"] if row else ""
            if len(self._tsqueries) >= MAX_KEPT_TSQUERIES:
                self._tsqueries.clear()
            self._tsqueries[words] = known
        return known

    async def embed(self, words: str) -> str | None:
        """Embedded off the event loop; a failure leaves the search ranking by full text alone."""
        if self.semantic is None or not words.strip():
            return None
        try:
            [vector] = await asyncio.to_thread(self.semantic.embedder.embed, [words])
        except EmbeddingFailed as error:
            log.warning("embedding a search failed; full text only", extra={"error": str(error)})
            return None
        return vector_literal(vector) if any(vector) else None  # (nothing to go by: stop words only)

    async def fetch_all(self, query: Any, params: Any, *, binary: bool = False) -> list[dict[str, Any]]:
        async def one(conn: psycopg.AsyncConnection[Any]) -> list[list[dict[str, Any]]]:
            cur = conn.cursor(row_factory=dict_row)
            await cur.execute(query, params, prepare=True, binary=binary)
            return [await cur.fetchall()]

        return (await self._reading(one))[0]

    async def _reading(self, read: Callable[[psycopg.AsyncConnection[Any]], Awaitable[Rows]]) -> Rows:
        # Pooled connections are not pinged before use (a round trip per query); a read
        # that meets a dropped one has the pool's idle ones checked (the server may have
        # dropped them all) and is tried once more, if Postgres answers at all.
        await self._check_reachable()
        for attempt in (1, 2):
            try:
                async with self.pool.connection() as conn:
                    with self._guarding(conn):
                        return await read(conn)
            except PoolTimeout:
                self._went_away()
                raise  # no connection came within the pool's wait: Postgres is away, say so now
            except (psycopg.OperationalError, psycopg.InterfaceError):
                if attempt == 2 or not await answers_off_loop(self.reachability):
                    self._went_away()
                    raise
                await self.pool.check()
        raise AssertionError("unreachable")

    async def _check_reachable(self) -> None:
        """While Postgres is known to be away, a read fails at once unless a probe connects."""
        if self.reachability is not None and self.reachability.down and not await answers_off_loop(self.reachability):
            raise psycopg.OperationalError("the database is unreachable")  # (what a driver failure raises here)

    def _guarding(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """A server that stops answering mid-query costs the read `within`, not for ever."""
        return self.reachability.guarding(conn) if self.reachability is not None else contextlib.nullcontext()

    def _went_away(self) -> None:
        if self.reachability is not None:
            self.reachability.down = True

    async def fetch_all_within(
        self, query: Any, params: Any, *, seconds: float, too_long: ChronicleError
    ) -> list[dict[str, Any]]:
        """Postgres cancels it after `seconds`, rather than a pooled connection being held for
        as long as it takes."""
        await self._check_reachable()
        async with self.pool.connection() as conn, conn.transaction():
            with self._guarding(conn):
                await conn.execute("SELECT set_config('statement_timeout', %s, true)", (f"{round(seconds * 1000)}ms",))
                cur = conn.cursor(row_factory=dict_row)
                try:
                    await cur.execute(query, params, prepare=True)
                except psycopg.errors.QueryCanceled:
                    raise too_long from None
                return await cur.fetchall()

