"""Real servers for tests: the machine's Postgres and NATS when reachable, else embedded ones."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from adapters.embedded import EmbeddedNats, EmbeddedPostgres, reachable

LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
LOCAL_NATS = "nats://127.0.0.1:4222"


@dataclass
class TestServers:
    __test__ = False  # a fixture value, not a test class

    admin_url: str  # a database we may CREATE DATABASE from
    nats_url: str

    def database_url(self, name: str) -> str:
        info = psycopg.conninfo.conninfo_to_dict(self.admin_url)
        info["dbname"] = name
        return psycopg.conninfo.make_conninfo(**info)

    @contextlib.contextmanager
    def fresh_database(self) -> Iterator[str]:
        """A new, empty database for one test or session; dropped afterwards."""
        name = f"chronicle_test_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        try:
            yield self.database_url(name)
        finally:
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@contextlib.contextmanager
def test_servers(scratch: Path) -> Iterator[TestServers]:
    # CHRONICLE_TEST_EMBEDDED=1 runs the suite as a machine without local servers would.
    local = os.environ.get("CHRONICLE_TEST_EMBEDDED") != "1"
    with contextlib.ExitStack() as stack:
        if local and reachable("127.0.0.1", 5432):
            admin_url = LOCAL_POSTGRES
        else:
            postgres = EmbeddedPostgres(scratch)
            admin_url = postgres.start()
            stack.callback(postgres.stop)
        if local and reachable("127.0.0.1", 4222):
            nats_url = LOCAL_NATS
        else:
            nats = EmbeddedNats(scratch)
            nats_url = nats.start()
            stack.callback(nats.stop)
        yield TestServers(admin_url, nats_url)
