"""`./dev bench outage`: how fast requests fail while Postgres is stopped, and how fast they work again.

Starts a Postgres of its own (the embedded one, pgserver) and `chronicle serve` on it, then
stops Postgres for `--outage` seconds. Meanwhile, once a second, it times a command
(add_message) and a query (conversations.list) until each is answered (`unavailable`).
Then it starts Postgres again and sends commands back to back, timing from the moment
Postgres accepts connections until the first one succeeds. It checks that nothing sent
during the outage was written. Prints a table; the aims are 2 s and 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import tempfile
import time
from pathlib import Path

import psycopg
from chronicle_client import ChronicleClient, ChronicleError

from adapters.embedded import EmbeddedPostgres
from adapters.store.postgres import PostgresTarget, migrate
from bench.report import Report, percentile, show, under
from bench.servers import bench_servers
from bench.service import ServiceProcess

CLIENT_TIMEOUT = 30.0  # long enough to see a slow answer rather than the client's own timeout


async def timed(call: object) -> tuple[float, str]:
    started = time.perf_counter()
    try:
        await call  # type: ignore[misc]
        outcome = "ok"
    except ChronicleError as error:
        outcome = error.code
    except TimeoutError:
        outcome = "timeout"
    return (time.perf_counter() - started) * 1000, outcome


class Silenced:
    """Postgres frozen (SIGSTOP on the postmaster and every backend): connections are taken
    by the kernel and then never answered, as with a server behind a dropped route."""

    def __init__(self, postgres: EmbeddedPostgres):
        self.postgres = postgres
        self.pids: list[int] = []

    def stop(self) -> None:
        self.pids = postgres_processes(self.postgres.data_dir)
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)

    def start(self) -> str:
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError):  # (a backend whose client left may be gone)
                os.kill(pid, signal.SIGCONT)
        self.pids = []
        return ""


def postgres_processes(data_dir: Path) -> list[int]:
    """The postmaster running on `data_dir` and its children."""
    parents: dict[int, int] = {}
    postmaster = None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if cmdline[0].endswith(b"postgres") and str(data_dir).encode() in cmdline:
            postmaster = int(entry.name)
    if postmaster is None:
        raise RuntimeError(f"no postmaster runs on {data_dir}")
    return [postmaster, *(pid for pid, parent in parents.items() if parent == postmaster)]


async def measure(
    postgres: EmbeddedPostgres | Silenced, url: str, service: ServiceProcess, outage: float, kind: str = "stopped"
) -> Report:
    report = Report({"suite": "outage", "outage_seconds": outage, "kind": kind})
    client = await ChronicleClient.connect(service.nats_url, service.token("outage"), prefix=service.subject_prefix,
                                           timeout=CLIENT_TIMEOUT)
    try:
        started = await client.conversations.start(title="outage bench")
        await client.conversations.add_message(started.conversation_id, "user", "before")
        postgres.stop()
        commands, queries, outcomes = [], [], set()
        ends = time.monotonic() + outage
        while time.monotonic() < ends:
            took, outcome = await timed(client.conversations.add_message(started.conversation_id, "user", "during"))
            commands.append(took)
            outcomes.add(outcome)
            took, outcome = await timed(client.conversations.list())
            queries.append(took)
            outcomes.add(outcome)
            await asyncio.sleep(1.0)
        postgres.start()
        back = time.perf_counter()
        while True:  # from the moment Postgres accepts connections
            try:
                psycopg.connect(url, connect_timeout=2).close()
                break
            except psycopg.Error:
                back = time.perf_counter()
        tries = 0
        while True:
            tries += 1
            _, outcome = await timed(client.conversations.add_message(started.conversation_id, "user", "after"))
            if outcome == "ok":
                break
        recovered = (time.perf_counter() - back) * 1000
        messages = [m.content for m in (await client.conversations.get(started.conversation_id)).messages]
    finally:
        await client.close()
    report.add("command while Postgres is down, p50", percentile(commands, 50), "ms", under(2000))
    report.add("command while Postgres is down, max", max(commands), "ms", under(2000))
    report.add("query while Postgres is down, p50", percentile(queries, 50), "ms", under(2000))
    report.add("query while Postgres is down, max", max(queries), "ms", under(2000))
    report.add("Postgres back -> first command ok", recovered, "ms", under(1000), note=f"{tries} tries")
    report.add("answers during the outage other than unavailable", len(outcomes - {"unavailable"}), "",
               note=", ".join(sorted(outcomes)))
    report.add("messages written during the outage", messages.count("during"), "", under(1))
    return report


def run(outage: float, silent: bool = False) -> tuple[Report, Path]:
    with tempfile.TemporaryDirectory(prefix="chronicle-bench-outage-") as workdir:
        postgres = EmbeddedPostgres(Path(workdir))
        url = postgres.start()
        try:
            migrate(PostgresTarget(url))
            with bench_servers(None, None) as servers:
                service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir))
                service.start()
                with service.stopped_afterwards():
                    down = Silenced(postgres) if silent else postgres
                    report = asyncio.run(measure(down, url, service, outage, "silent" if silent else "stopped"))
        finally:
            postgres.stop()
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench outage", description=__doc__.splitlines()[0])
    p.add_argument("--outage", type=float, default=30.0, help="seconds Postgres stays stopped (default 30)")
    p.add_argument("--silent", action="store_true",
                   help="freeze Postgres (SIGSTOP) instead of stopping it: connections hang unanswered, as behind a dropped route")
    args = p.parse_args(argv)
    show(*run(args.outage, args.silent))


if __name__ == "__main__":
    main()
