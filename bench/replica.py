"""A private PostgreSQL primary and streaming replica on loopback, set up as infra/postgres says.

The primary is made with `initdb` and infra/postgres/primary.conf, its replication lines
come from infra/postgres/pg_hba.conf (the `replicator` role with a password), and the
replica is a `pg_basebackup -R -C -S` of it running with infra/postgres/replica.conf: the
files a deployment uses are the ones checked. pgserver's binaries; as root, the servers
run as pgserver's own system user, as pgserver runs them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from adapters.embedded import free_port

INFRA = Path(__file__).resolve().parent.parent / "infra" / "postgres"
SLOT = "chronicle_replica"
READY_TIMEOUT = 60  # seconds a server may take to start


def binaries() -> Path:
    import pgserver  # the package ships PostgreSQL's programs beside its own code

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


@dataclass
class Server:
    """One PostgreSQL server: its data directory and loopback port, started with pg_ctl."""

    data_dir: Path
    port: int
    system_user: str | None

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def run(self, program: str, *args: str, env: dict[str, str] | None = None) -> None:
        done = subprocess.run(
            [str(binaries() / program), *args], capture_output=True, timeout=READY_TIMEOUT,
            user=self.system_user, env={**os.environ, **(env or {})},
        )
        if done.returncode != 0:
            log = self.data_dir / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{program} {' '.join(args)} failed: {done.stderr.decode()[-2000:]}\n{tail}")

    def start(self) -> None:
        self.run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.data_dir / "server.log"), "-w", "start")

    def stop(self) -> None:
        if (self.data_dir / "postmaster.pid").exists():
            self.run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def configure(self, *lines: str) -> None:
        """Later lines of postgresql.conf win over earlier ones (and over what was copied)."""
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write("\n" + "\n".join(lines) + "\n")


@dataclass
class ReplicatedPostgres:
    """A primary and a hot standby streaming from it, in a directory of their own (removed
    by `stop`). Not under pytest's temporary directory: each pytest session on the machine
    makes that readable by its owner alone, and the servers' user would lose its way in."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chronicle-replicated-")))
    replicator_password: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    system_user: str | None = None
    primary: Server = field(init=False)
    replica: Server = field(init=False)

    def start(self) -> ReplicatedPostgres:
        self._own_root()
        config = self.root / "infra"  # copies, readable by the servers' user wherever the checkout is
        shutil.copytree(INFRA, config)
        self._chown(config)
        primary_port = free_port()
        replica_port = free_port()
        while replica_port == primary_port:
            replica_port = free_port()
        self.primary = Server(self.root / "primary", primary_port, self.system_user)
        self.replica = Server(self.root / "replica", replica_port, self.system_user)

        self.primary.run("initdb", "-D", str(self.primary.data_dir), "-U", "postgres", "--auth=trust", "--encoding=utf8")
        (self.primary.data_dir / "pg_hba.conf").write_text(
            "# The test's own superuser, on loopback only; then Chronicle's deployed lines.\n"
            "host all postgres 127.0.0.1/32 trust\n"
            f'include "{config / "pg_hba.conf"}"\n'
        )
        self.primary.configure(
            f"include '{config / 'primary.conf'}'",
            "listen_addresses = '127.0.0.1'",
            f"port = {primary_port}",
            "unix_socket_directories = ''",
        )
        self.primary.start()
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            conn.execute(
                psycopg.sql.SQL("CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD {}").format(
                    psycopg.sql.Literal(self.replicator_password)
                )
            )
        # -R: primary_conninfo and standby.signal; -C -S: the slot that keeps its WAL.
        self.primary.run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary_port), "-U", "replicator", "-D",
            str(self.replica.data_dir), "-R", "-C", "-S", SLOT, "-X", "stream",
            env={"PGPASSWORD": self.replicator_password},
        )
        self.replica.configure(f"include '{config / 'replica.conf'}'", f"port = {replica_port}")
        self.replica.start()
        self.wait_streaming()
        return self

    def stop(self) -> None:
        try:
            for server in (getattr(self, "replica", None), getattr(self, "primary", None)):
                if server is not None:
                    server.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> tuple[str, str]:
        """A new database on the primary, once the replica has it too: its URLs on both."""
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
        self.wait_replayed()
        return self.primary.url(name), self.replica.url(name)

    def wait_streaming(self) -> None:
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            deadline = time.monotonic() + READY_TIMEOUT
            while not conn.execute("SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'").fetchone():
                if time.monotonic() > deadline:
                    raise AssertionError("the replica did not start streaming")
                time.sleep(0.05)

    def wait_replayed(self) -> None:
        """Until the replica has replayed everything the primary has written so far."""
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            [lsn] = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("",)
        with psycopg.connect(self.replica.url(), autocommit=True) as conn:
            deadline = time.monotonic() + READY_TIMEOUT
            while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise AssertionError("the replica did not replay the primary's WAL")
                time.sleep(0.02)

    def _own_root(self) -> None:
        """PostgreSQL refuses to run as root: as root, the servers run as pgserver's user."""
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            return
        self.root.chmod(0o755)
        from pgserver.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        self.system_user = "pgserver"
        ensure_user_exists(self.system_user)
        ensure_prefix_permissions(self.root)
        bin_dir = binaries()
        ensure_folder_permissions(bin_dir, 0o555)
        ensure_folder_permissions(bin_dir.parent / "lib", 0o444)
        self._chown(self.root)

    def _chown(self, path: Path) -> None:
        if self.system_user is None:
            return
        for item in [path, *path.rglob("*")]:
            shutil.chown(item, self.system_user, self.system_user)
