"""Where the benchmark runs: the machine's Postgres and NATS when reachable, else embedded ones,
and a fresh database of its own, dropped afterwards unless kept."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from adapters.embedded import EmbeddedNats, EmbeddedPostgres, reachable

LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
LOCAL_NATS = "nats://127.0.0.1:4222"
REPORTED_SETTINGS = [
    "server_version", "autovacuum", "fsync", "synchronous_commit", "shared_buffers", "work_mem", "max_connections",
]


@dataclass(frozen=True)
class BenchServers:
    admin_url: str  # a database on the server we may CREATE DATABASE from
    nats_url: str

    def database_url(self, name: str) -> str:
        info = psycopg.conninfo.conninfo_to_dict(self.admin_url)
        info["dbname"] = name
        return psycopg.conninfo.make_conninfo(**info)

    def server_settings(self) -> dict[str, str]:
        """The Postgres settings that shape the results (autovacuum off means read models bloat)."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (REPORTED_SETTINGS,))
            return dict(rows.fetchall())  # type: ignore[arg-type]

    @contextlib.contextmanager
    def fresh_database(self, keep: bool) -> Iterator[str]:
        """A new database `chronicle_bench_<random>`; dropped on exit unless `keep`."""
        name = f"chronicle_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield self.database_url(name)
        finally:
            if not keep:
                with psycopg.connect(self.admin_url, autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextlib.contextmanager
def bench_servers(database_url: str | None, nats_url: str | None) -> Iterator[BenchServers]:
    """The given URLs; else the local servers when they answer; else embedded ones (stopped on exit)."""
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="chronicle-bench-")))
        if database_url is None:
            if reachable("127.0.0.1", 5432):
                database_url = LOCAL_POSTGRES
            else:
                postgres = EmbeddedPostgres(scratch)
                database_url = postgres.start()
                stack.callback(postgres.stop)
        if nats_url is None:
            if reachable("127.0.0.1", 4222):
                nats_url = LOCAL_NATS
            else:
                nats = EmbeddedNats(scratch)
                nats_url = nats.start()
                stack.callback(nats.stop)
        yield BenchServers(database_url, nats_url)
