"""Where the benchmark runs: the machine's Postgres and NATS when reachable, else embedded ones,
and a fresh database of its own, dropped afterwards unless kept."""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from adapters.embedded import EmbeddedPostgres
from bench.scratch import local_or_embedded, scratch_database

REPORTED_SETTINGS = [
    "server_version", "autovacuum", "fsync", "synchronous_commit", "shared_buffers", "work_mem", "max_connections",
]


@dataclass(frozen=True)
class BenchServers:
    admin_url: str  # a database on the server we may CREATE DATABASE from
    nats_url: str

    def server_settings(self) -> dict[str, str]:
        """The Postgres settings that shape the results (autovacuum off means read models bloat)."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", (REPORTED_SETTINGS,))
            return dict(rows.fetchall())

    def fresh_database(self, keep: bool) -> contextlib.AbstractContextManager[str]:
        """A new database `chronicle_bench_<random>`; dropped on exit unless `keep`."""
        return scratch_database(self.admin_url, "chronicle_bench", keep=keep)


def add_server_options(parser: argparse.ArgumentParser, *, nats: bool = True) -> None:
    """--database-url (and --nats-url), the servers `bench_servers` takes."""
    parser.add_argument("--database-url", help="PostgreSQL URL to CREATE DATABASE from (default: local or embedded)")
    if nats:
        parser.add_argument("--nats-url", help="NATS URL (default: local or embedded)")


@contextlib.contextmanager
def bench_servers(
    database_url: str | None, nats_url: str | None, *, embedded_postgres: bool = False
) -> Iterator[BenchServers]:
    """The given URLs; else the local servers when they answer; else embedded ones (stopped
    on exit). `embedded_postgres`: an embedded Postgres whatever answers locally (it has
    pgvector, for semantic search)."""
    with tempfile.TemporaryDirectory(prefix="chronicle-bench-") as scratch, contextlib.ExitStack() as stack:
        if embedded_postgres and database_url is None:
            postgres = EmbeddedPostgres(Path(scratch) / "embedded")
            database_url = postgres.start()
            stack.callback(postgres.stop)
        found = stack.enter_context(local_or_embedded(Path(scratch), database_url=database_url, nats_url=nats_url))
        yield BenchServers(*found)
