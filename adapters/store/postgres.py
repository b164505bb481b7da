"""Postgres connection settings and the versioned schema migrations under infra/."""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable
from importlib import resources

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

log = logging.getLogger(__name__)

MIGRATIONS_LOCK = 0x43485231  # "CHR1": one migrator at a time across the fleet


class PostgresTarget:
    """Where the database is; built once, used by every connection.

    Given a URL, or what tells it once the server is up (an embedded server's URL is known
    only when it has started): the composition root builds everything that connects to the
    database before anything starts, and nothing asks for the URL until it connects."""

    def __init__(self, url: str | Callable[[], str]) -> None:
        self._url = url

    @property
    def url(self) -> str:
        return self._url if isinstance(self._url, str) else self._url()

    @property
    def params(self) -> dict[str, str]:
        info = conninfo_to_dict(self.url)
        return {
            "dbname": str(info.get("dbname", "postgres")),
            "host": str(info.get("host", "127.0.0.1")),
            "port": str(info.get("port", "5432")),
            "user": str(info.get("user", "postgres")),
            "password": str(info.get("password", "")),
        }

    def describe(self) -> str:
        """A URL psql accepts, without the password: safe for logs, usable as printed (a
        Unix socket's directory goes in `host=`, as libpq reads it)."""
        p = self.params
        user, dbname = urllib.parse.quote(p["user"], safe=""), urllib.parse.quote(p["dbname"], safe="")
        if p["host"].startswith("/"):
            return f"postgresql://{user}@/{dbname}?host={urllib.parse.quote(p['host'], safe='/')}&port={p['port']}"
        host = f"[{p['host']}]" if ":" in p["host"] else p["host"]
        return f"postgresql://{user}@{host}:{p['port']}/{dbname}"

    def connect(self, **kwargs: object) -> psycopg.Connection:
        return psycopg.connect(self.url, **kwargs)  # type: ignore[arg-type]


def database_url(server_url: str, name: str) -> str:
    """The URL of database `name` on the server of `server_url`."""
    info = conninfo_to_dict(server_url)
    info["dbname"] = name
    return make_conninfo("", **info)


def pending_migrations(applied: set[int]) -> list[tuple[int, str, str]]:
    folder = resources.files("infra") / "migrations"
    found = []
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            version = int(entry.name.split("_", 1)[0])
            if version not in applied:
                found.append((version, entry.name, entry.read_text()))
    return sorted(found)


def migrate(target: PostgresTarget) -> list[str]:
    """Apply every migration not yet applied, each in its own transaction; return their names."""
    applied_now: list[str] = []
    with target.connect(autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATIONS_LOCK,))
        try:
            conn.execute("CREATE SCHEMA IF NOT EXISTS chronicle")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS chronicle.schema_migrations ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            applied = {row[0] for row in conn.execute("SELECT version FROM chronicle.schema_migrations")}
            for version, name, text in pending_migrations(applied):
                with conn.transaction():
                    conn.execute(text)  # a trusted file shipped with the package
                    conn.execute(
                        "INSERT INTO chronicle.schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
                log.info("migration applied", extra={"migration": name})
                applied_now.append(name)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATIONS_LOCK,))
    return applied_now
