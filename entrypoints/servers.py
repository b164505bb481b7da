"""The database and NATS a Chronicle uses: the configured ones, checked once, or embedded ones.

`chronicle serve` runs the embedded NATS, one process per data dir: it holds `serve.lock`,
which records what it runs, and keeps the NATS on the port remembered in the data dir
(`nats-port`), so a client configured once (`chronicle mcp`) finds it after a restart. The
embedded Postgres is shared: pgserver counts the processes using it and the last one stops
it, so the operator's commands (which need only the database) work beside a running service.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import nats.errors
import psycopg
from nats.aio.client import Client as NATS

from adapters.embedded import BusSecrets, EmbeddedNats, EmbeddedPostgres, free_port, port_free, stop_leftover
from adapters.messaging.connect import connect_options, without_credentials
from adapters.store.postgres import PostgresTarget
from entrypoints.settings import Settings, SetupError

LOCK = "serve.lock"
NATS_PORT = "nats-port"
FIRST_CONNECT = 10.0  # seconds a start gives a configured server to answer before it gives up, saying why


@dataclass(frozen=True)
class Callout:
    """How this instance answers the NATS server's auth callouts."""

    url: str  # with the callout account's credentials
    issuer_seed: str


@dataclass(frozen=True)
class RunningService:
    """What the `chronicle serve` running embedded servers on a data dir records in its lock file."""

    pid: int
    database_url: str
    nats_url: str  # without credentials: what users connect to


def running_service(data_dir: Path) -> RunningService | None:
    """The service running embedded servers on `data_dir`, if one runs."""
    try:
        record = json.loads((data_dir / LOCK).read_text())
        found = RunningService(int(record["pid"]), str(record["database_url"]), str(record["nats_url"]))
        os.kill(found.pid, 0)  # (raises ProcessLookupError once it has gone)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found


def local_nats_url(data_dir: Path) -> str | None:
    """The URL of the embedded NATS of `data_dir`, at the port its first start chose and every
    later one keeps; None when no service ever ran there."""
    try:
        return f"nats://127.0.0.1:{int((data_dir / NATS_PORT).read_text())}"
    except (OSError, ValueError):
        return None


def reach_postgres(url: str) -> None:
    """Connect once, or say in one line why not and what to set."""
    try:
        psycopg.connect(url, connect_timeout=int(FIRST_CONNECT)).close()
    except psycopg.Error as error:
        reason = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
        raise SetupError(
            f"cannot reach PostgreSQL at {PostgresTarget(url).describe()} (CHRONICLE_DATABASE_URL): {reason}; "
            "start it or fix the URL, or unset CHRONICLE_DATABASE_URL to run an embedded one"
        ) from None


def reach_nats(url: str) -> None:
    """Connect once (the service's own connections then reconnect for ever), or say in one
    line why not and what to set, within FIRST_CONNECT seconds."""

    seen: list[Exception] = []

    async def quiet(error: Exception) -> None:  # (the reason is said once, below)
        seen.append(error)

    async def probe() -> None:
        nc = NATS()
        try:
            await asyncio.wait_for(
                nc.connect(**connect_options(url), connect_timeout=2, max_reconnect_attempts=2, reconnect_time_wait=1,
                           allow_reconnect=False, error_cb=quiet),
                FIRST_CONNECT,
            )
        finally:
            with contextlib.suppress(Exception):
                await nc.close()

    try:
        asyncio.run(probe())
    except (OSError, TimeoutError, nats.errors.Error) as error:
        cause = seen[-1] if seen and isinstance(error, nats.errors.NoServersError | TimeoutError) else error
        reason = str(cause).strip() or ("no answer" if isinstance(cause, TimeoutError) else type(cause).__name__)
        raise SetupError(
            f"cannot reach NATS at {without_credentials(url)} (CHRONICLE_NATS_URL): {reason}; "
            "start it or fix the URL, or unset CHRONICLE_NATS_URL to run an embedded one"
        ) from None


@dataclass
class Servers:
    """The database and NATS URLs in use, starting embedded servers for the missing ones."""

    settings: Settings
    database_url: str = ""
    nats_url: str = ""  # what users connect to (with their token, when the bus needs credentials)
    service_nats_url: str = ""  # the same server, with Chronicle's own credentials when it needs them
    callout: Callout | None = None
    started: list[EmbeddedPostgres | EmbeddedNats] = field(default_factory=list)
    _lock: int | None = None  # the lock file's descriptor, while this process runs the embedded NATS

    def start(self, *, nats: bool = True) -> Servers:
        """Embedded servers for the URLs not set (NATS only when asked for: the operator's
        commands need just the database, and share the embedded one with a running service)."""
        settings = self.settings
        embedded_nats = nats and not settings.nats_url
        if embedded_nats:
            self._lock_data_dir()
        if settings.database_url:
            reach_postgres(settings.database_url)
            self.database_url = settings.database_url
        else:
            self.database_url = self._embed(EmbeddedPostgres(settings.data_dir))
        if nats and settings.nats_url:
            reach_nats(settings.nats_url)
            self.service_nats_url = settings.nats_url
            self.nats_url = without_credentials(settings.nats_url)  # (logged, and what tests hand users)
            if settings.nats_callout_seed is not None:
                if not settings.nats_callout_url:
                    raise SetupError("CHRONICLE_NATS_CALLOUT_SEED needs CHRONICLE_NATS_CALLOUT_URL: set both, or neither")
                self.callout = Callout(settings.nats_callout_url, settings.nats_callout_seed.get_secret_value())
        elif embedded_nats:
            auth = BusSecrets.kept_in(settings.data_dir) if settings.embedded_nats_auth else None
            port = self._nats_port()
            self.nats_url = self.service_nats_url = self._embed(EmbeddedNats(settings.data_dir, port=port, auth=auth))
            (settings.data_dir / NATS_PORT).write_text(f"{port}\n")
            if auth is not None:
                self.service_nats_url = auth.service_url(self.nats_url)
                self.callout = Callout(auth.callout_url(self.nats_url), auth.issuer_seed)
            self._record()
        return self

    def _lock_data_dir(self) -> None:
        """One process at a time runs the embedded NATS on a data dir."""
        data_dir = self.settings.data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        # Opened without truncating: the holder's record stays readable to whoever is refused.
        lock = os.open(data_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            running = running_service(data_dir)
            who = f"`chronicle serve` (pid {running.pid})" if running else "another `chronicle serve`"
            raise SetupError(
                f"{who} already runs the embedded servers on {data_dir}: stop it first, or give this one a "
                "CHRONICLE_DATA_DIR of its own (the operator's commands work beside it)"
            ) from None
        self._lock = lock

    def _record(self) -> None:
        """What an operator's command or `chronicle mcp` reads to find this service."""
        assert self._lock is not None
        record = json.dumps({"pid": os.getpid(), "database_url": self.database_url, "nats_url": self.nats_url})
        os.ftruncate(self._lock, 0)
        os.pwrite(self._lock, record.encode() + b"\n", 0)

    def _nats_port(self) -> int:
        """CHRONICLE_EMBEDDED_NATS_PORT, else the port remembered in the data dir, else a free one."""
        data_dir, pinned = self.settings.data_dir, self.settings.embedded_nats_port
        remembered = local_nats_url(data_dir)
        port = pinned or (int(remembered.rpartition(":")[2]) if remembered else 0)
        if not port:
            return free_port()
        stop_leftover(data_dir / "nats.pid")  # a killed predecessor's server holds the port still
        if not port_free("127.0.0.1", port):
            source = "CHRONICLE_EMBEDDED_NATS_PORT" if pinned else f"remembered in {data_dir / NATS_PORT}"
            raise SetupError(
                f"the embedded NATS's port {port} ({source}) is taken by another program: stop that program, "
                "or set CHRONICLE_EMBEDDED_NATS_PORT to a free port (clients configured with the old one need the new)"
            )
        return port

    def _embed(self, server: EmbeddedPostgres | EmbeddedNats) -> str:
        url = server.start()
        self.started.append(server)
        return url

    def stop(self) -> None:
        while self.started:
            self.started.pop().stop()
        if self._lock is not None:
            os.ftruncate(self._lock, 0)
            os.close(self._lock)
            self._lock = None
