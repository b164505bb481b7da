"""Scratch servers, databases and streams for tests and benchmarks (never the service's own)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from psycopg import sql

from adapters.embedded import EmbeddedNats, EmbeddedPostgres, reachable
from adapters.messaging.jetstream import stream_names
from adapters.store import postgres

LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"
LOCAL_NATS = "nats://127.0.0.1:4222"


@contextlib.contextmanager
def local_or_embedded(
    scratch: Path, *, database_url: str | None = None, nats_url: str | None = None, prefer_local: bool = True
) -> Iterator[tuple[str, str]]:
    """(Postgres URL, NATS URL) for tests and benchmarks: the given ones, else this machine's
    servers when they answer on their usual ports, else embedded ones (stopped on exit)."""
    with contextlib.ExitStack() as stack:
        if database_url is None:
            if prefer_local and reachable("127.0.0.1", 5432):
                database_url = LOCAL_POSTGRES
            else:
                postgres = EmbeddedPostgres(scratch)
                database_url = postgres.start()
                stack.callback(postgres.stop)
        if nats_url is None:
            if prefer_local and reachable("127.0.0.1", 4222):
                nats_url = LOCAL_NATS
            else:
                nats = EmbeddedNats(scratch)
                nats_url = nats.start()
                stack.callback(nats.stop)
        yield database_url, nats_url


@contextlib.contextmanager
def scratch_database(server_url: str, prefix: str, *, keep: bool = False) -> Iterator[str]:
    """A new, empty database `<prefix>_<random>` for tests and benchmarks; dropped on exit
    unless `keep`. `server_url` is any database on that server we may CREATE DATABASE from."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield postgres.database_url(server_url, name)
    finally:
        if not keep:
            with psycopg.connect(server_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


async def remove_streams(js: JetStreamContext, prefix: str) -> list[str]:
    """Delete every stream (object stores and key-value buckets included) of the instance
    with this subject prefix: the names Chronicle gives them start with the prefix's
    stream form."""
    base = prefix.replace(".", "_").upper() + "_"
    removed = []
    for name in await stream_names(js):
        if name.startswith((base, "OBJ_" + base, "KV_" + base)):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(name)
                removed.append(name)
    return removed
