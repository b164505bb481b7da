"""Runs `chronicle serve` as a subprocess on the bench database and watches its read models catch up."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import orjson

from adapters.auth import TokenAuthority
from adapters.messaging.connect import connect_options
from adapters.store.postgres import PostgresTarget
from bench.scratch import remove_streams

PROJECTION_POSITIONS = "SELECT name, position FROM chronicle.projections"
HEAD = "SELECT coalesce(max(notification_id), 0) FROM chronicle.events"


def service_settings(pairs: list[str] | None) -> dict[str, str]:
    """`--service-setting name=value` arguments as CHRONICLE_* variables (a bench compares settings)."""
    settings = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"--service-setting: expected NAME=VALUE, got {pair!r}")
        settings[f"CHRONICLE_{name.upper()}"] = value
    return settings


def add_service_setting_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--service-setting", action="append", metavar="NAME=VALUE",
        help="a setting of the service under test, e.g. projection_nice=19 (repeatable)",
    )


UNLIMITED = ("REQUESTS_PER_MINUTE", "SEARCH_PER_MINUTE", "EXPORT_PER_MINUTE", "HEAVY_PER_MINUTE", "IN_FLIGHT_PER_USER",
             "HEAVY_IN_FLIGHT_PER_USER")


def chronicle_command() -> list[str]:
    """The `chronicle` script of this virtualenv (what ./dev serve runs), or the module behind it."""
    script = Path(sys.executable).parent / "chronicle"
    return [str(script)] if script.exists() else [sys.executable, "-m", "entrypoints.cli"]


@dataclass
class ServiceProcess:
    """One `chronicle serve` child process, configured only by the CHRONICLE_* variables given."""

    database_url: str
    nats_url: str
    subject_prefix: str
    jwt_secret: str
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    settings: dict[str, str] = field(default_factory=dict)  # more CHRONICLE_* variables, e.g. CHRONICLE_JOB_WORKERS
    limited: bool = False  # the service's own per-user limits (benchmarks of capacity turn them off)
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / "service.log"

    @classmethod
    def fresh(
        cls, database_url: str, nats_url: str, workdir: Path, settings: dict[str, str] | None = None
    ) -> ServiceProcess:
        """A service with subjects and a JWT secret of its own (not started); `settings` are
        more CHRONICLE_* variables for it."""
        return cls(database_url, nats_url, f"bench{secrets.token_hex(4)}", secrets.token_urlsafe(48), workdir,
                   settings=dict(settings or {}))

    def token(self, user: str, claims: dict[str, Any] | None = None) -> str:
        """A bearer token this service accepts (`claims`: more, e.g. roles)."""
        return TokenAuthority(secret=self.jwt_secret).issue(user, claims=claims)

    @property
    def pid(self) -> int:
        assert self.process is not None, "not started"
        return self.process.pid

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONICLE_")}  # no stray settings
        env.update(
            CHRONICLE_DATABASE_URL=self.database_url,
            CHRONICLE_NATS_URL=self.nats_url,
            CHRONICLE_SUBJECT_PREFIX=self.subject_prefix,
            CHRONICLE_JWT_SECRET=self.jwt_secret,
            CHRONICLE_DATA_DIR=str(self.workdir / "data"),
            CHRONICLE_LOG_LEVEL="INFO",
            CHRONICLE_HTTP_PORT="0",  # no REST API in the service's process unless asked for
            CHRONICLE_METRICS_PORT="0",  # nor a metrics endpoint (the instruments record all the same)
        )
        # Benchmarks measure capacity: per-user limits off unless asked for (or set).
        if not self.limited:
            env.update({f"CHRONICLE_LIMIT_{name}": "0" for name in UNLIMITED})
        env.update(self.settings)
        return env

    def start(self, timeout: float = 120.0, command: str = "serve", ready: str = "ready") -> None:
        """Start the service (or another `chronicle` command, e.g. `http`, or `projections run`
        which logs `projections running`) and return once it logs `ready` (its endpoints are
        up; a build that outlasts the service's 60 s ready timeout logs it with `rebuilding`)."""
        with self.log_path.open("wb") as log:
            self.started_at = time.perf_counter()
            self.process = subprocess.Popen(
                [*chronicle_command(), *command.split()], env=self.environment(), stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while not self._logged(ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chronicle serve did not become ready:\n{self.log_tail()}")
            time.sleep(0.05)

    def _logged(self, message: str) -> bool:
        for line in self.log_path.read_bytes().splitlines():
            try:
                if orjson.loads(line).get("msg") == message:
                    return True
            except orjson.JSONDecodeError:
                continue
        return False

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    @contextlib.contextmanager
    def stopped_afterwards(self, say: Callable[[str], None] = print) -> Iterator[ServiceProcess]:
        """Stops the service when the block ends; if the block failed, shows the service's
        last log lines first (what it said is usually why)."""
        try:
            yield self
        except BaseException:
            if self.process is not None:
                say("service log (last lines):\n" + self.log_tail())
            raise
        finally:
            self.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (the service finishes in-flight requests), then SIGKILL if it hangs; then
        its JetStream streams go (they would stay for days, one set per bench run)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        with concurrent.futures.ThreadPoolExecutor(1) as thread:  # (a caller may be inside an event loop)
            try:
                thread.submit(asyncio.run, self._remove_streams()).result()
            except nats.errors.Error as error:  # (a cluster that lost a node may not answer its API in time)
                print(f"streams of {self.subject_prefix} not removed: {type(error).__name__}", file=sys.stderr)

    def kill(self) -> None:
        """SIGKILL, as a machine that dies mid-request."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    async def _remove_streams(self) -> None:
        # (unreported: after a node was killed, the client tries it again before a live one)
        nc = await nats.connect(**connect_options(self.nats_url), error_cb=unreported)
        try:
            await remove_streams(nc.jetstream(), self.subject_prefix)
        finally:
            await nc.close()


async def unreported(error: Exception) -> None:
    """A bench client's NATS connection errors, not printed: a server killed, refused or
    down on purpose (nats-py prints each one otherwise). What fails a request still fails it."""


# The service's group-commit instruments (adapters/metrics.py), read before and after a round:
# how many commands a group held, how long one took, how busy the writer was.
GROUP_COMMITS = ("chronicle_group_commit_commands_count", "chronicle_group_commit_commands_sum",
                 "chronicle_group_commit_seconds_sum")


def metric_values(port: int, names: tuple[str, ...]) -> dict[str, float]:
    """The values of series (e.g. `chronicle_group_commit_seconds_sum`; a labelled one named
    with its labels as the endpoint prints them) scraped from a service's metrics endpoint on
    `port` (its CHRONICLE_METRICS_PORT); 0 for one not there yet."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        lines = reply.read().decode().splitlines()
    values = dict.fromkeys(names, 0.0)
    for line in lines:
        name, _, value = line.partition(" ")
        if name in values:
            values[name] = float(value)
    return values


def positions(target: PostgresTarget) -> tuple[int, dict[str, int]]:
    """The log's head and each projection's committed position."""
    with target.connect(autocommit=True) as conn:
        head = conn.execute(HEAD).fetchone()[0]  # type: ignore[index]
        return head, dict(conn.execute(PROJECTION_POSITIONS).fetchall())


def wait_for_read_models(
    target: PostgresTarget,
    names: list[str],
    position: int,
    *,
    since: float,
    timeout: float,
    poll: float = 0.2,
    progress: Callable[[dict[str, int]], None] = lambda positions: None,
) -> dict[str, float]:
    """Seconds from `since` (a perf_counter time) until each read model reached `position`."""
    reached: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(reached) < len(names):
        _, current = positions(target)
        now = time.perf_counter()
        for name in names:
            if name not in reached and current.get(name, 0) >= position:
                reached[name] = now - since
        progress(current)
        if time.monotonic() > deadline:
            missing = ", ".join(f"{n} at {current.get(n, 0)}" for n in names if n not in reached)
            raise TimeoutError(f"read models did not reach {position} in {timeout:.0f} s: {missing}")
        time.sleep(poll)
    return reached
