"""What every query connection is set to, whatever the server's own settings."""

from __future__ import annotations

from datetime import UTC
from zoneinfo import ZoneInfo

import psycopg
from psycopg.sql import SQL, Identifier

from adapters.read_side.queries import PostgresQueries, query_pool
from adapters.read_side.sealing import Seals
from adapters.store.memory import InMemoryKeyRing
from services.runtime.cursors import CursorSeal
from tests.servers import TestServers


async def test_replies_tell_times_in_utc_on_a_server_set_to_another_zone(servers: TestServers) -> None:
    with servers.fresh_database() as url:
        with psycopg.connect(url, autocommit=True) as conn:
            name = conn.info.dbname
            conn.execute(SQL("ALTER DATABASE {} SET timezone = 'America/New_York'").format(Identifier(name)))
        with psycopg.connect(url) as plain:  # (what a connection of the server's own gets)
            at = plain.execute("SELECT '2026-01-01 12:00+00'::timestamptz").fetchone()[0]  # type: ignore[index]
            assert at.tzinfo == ZoneInfo("America/New_York") and at.hour == 7
        async with query_pool(url) as pool:
            queries = PostgresQueries(pool, cursors=CursorSeal.of_this_process(), sealing=Seals(InMemoryKeyRing()))
            row = await queries.fetch_one("SELECT '2026-01-01 12:00+00'::timestamptz AS at", ())
            [binary] = await queries.fetch_all("SELECT '2026-01-01 12:00+00'::timestamptz AS at", (), binary=True)
        assert row is not None
        for at in (row["at"], binary["at"]):
            assert at.tzinfo is UTC and at.hour == 12
