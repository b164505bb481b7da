"""`./dev bench groups`: what a group commit costs the service beside what each command in it costs.

Starts `chronicle serve` (limits off) and drives add_message from one connection with 1, 4,
12, 32 and 100 requests in flight, each level in turn for a few seconds, twice: a group
commit holds at most what is in flight, so the levels give groups of those sizes. For each it
prints the rate, the service's CPU per message and the group commits (read from its metrics
endpoint), and then fits CPU per message = per command + per group / commands in a group by
least squares over the levels: the per-group part is what traffic in small groups (independent
callers, the REST gateway's ~12) pays on top of a benchmark's cohort of 100. Last, without a
server, it times the group commit statement's parameters for 1 and 100 events made by
psycopg's list dumper and as the typed arrays the event store passes (adapters/store/arrays.py).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from chronicle_client.connection import ChronicleClient
from chronicle_contract.conversations import AddMessage
from psycopg import postgres
from psycopg.adapt import AdaptersMap, PyFormat, Transformer

from adapters.embedded import free_port
from adapters.store import arrays
from adapters.store.postgres import PostgresTarget, migrate
from bench.cpu import process_cpu_seconds
from bench.gateway import throughput
from bench.report import Report, show
from bench.servers import add_server_options, bench_servers
from bench.service import GROUP_COMMITS, ServiceProcess, add_service_setting_option, metric_values, service_settings

LEVELS = (1, 4, 12, 32, 100)
CONVERSATIONS = 100


async def measure(nats_url: str, service: ServiceProcess, metrics_port: int, args: argparse.Namespace
                  ) -> dict[int, list[tuple[float, float, float, float]]]:
    """Per level: (msg/s, service CPU µs a message, commands a group, ms a group) of each round."""
    client = await ChronicleClient.connect(nats_url, service.token("groups-bench"), prefix=service.subject_prefix)
    try:
        conversations = [(await client.conversations.start(title="groups bench")).conversation_id
                         for _ in range(CONVERSATIONS)]
        payloads = itertools.cycle([AddMessage(conversation_id=c, role="user", content="a message").model_dump(mode="json")
                                    for c in conversations])

        async def add() -> None:
            await client.request("cmd.conversation.add_message", next(payloads))

        await throughput(add, 32, 1.0)  # (warm: statements prepared, aggregates cached)
        figures: dict[int, list[tuple[float, float, float, float]]] = {level: [] for level in args.levels}
        for round_ in range(args.rounds):
            for level in args.levels if round_ % 2 == 0 else reversed(args.levels):
                print(f"round {round_ + 1}/{args.rounds}: {level} in flight", flush=True)
                before = await asyncio.to_thread(metric_values, metrics_port, GROUP_COMMITS)
                cpu, started = process_cpu_seconds(service.pid), time.perf_counter()
                rate = await throughput(add, level, args.seconds)
                messages = max(rate * (time.perf_counter() - started), 1.0)
                cpu = (process_cpu_seconds(service.pid) - cpu) * 1e6 / messages
                after = await asyncio.to_thread(metric_values, metrics_port, GROUP_COMMITS)
                groups, commands, busy = (after[name] - before[name] for name in GROUP_COMMITS)
                figures[level].append((rate, cpu, commands / max(groups, 1), busy * 1000 / max(groups, 1)))
        return figures
    finally:
        await client.close()


def fitted(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(per command, per group) in µs from (commands a group, µs a message) points, least squares
    of µs a message = per command + per group × (1 / commands a group)."""
    per_group, per_command = statistics.linear_regression([1 / size for size, _ in points], [cpu for _, cpu in points])
    return per_command, per_group


def statement_parameters(report: Report, events: int) -> None:
    """The group commit statement's twelve arrays (adapters/store/event_store.py) for this
    many events, made into parameters as each new cursor does: by psycopg's list dumper,
    which works out each list's element type, and as the typed arrays the store passes."""
    typed_context = AdaptersMap(postgres.adapters)
    arrays.register(typed_context)
    columns: tuple[list[Any], ...] = (
        [uuid.uuid4() for _ in range(events)], list(range(1, events + 1)), ["conversation.MessageAdded"] * events,
        [bytes(300)] * events, ["chronicle_events"], [], [], [], [], [], [], [],
    )
    kinds = (arrays.Uuids, arrays.Int8s, arrays.Texts, arrays.Byteas, *[arrays.Texts] * 6, arrays.Byteas, arrays.Int4s)
    typed = [kind(column) for kind, column in zip(kinds, columns, strict=True)]
    formats = [PyFormat.BINARY] * len(columns)
    figures = []
    for context, params in ((None, list(columns)), (typed_context, typed)):
        runs = max(20_000 // events, 200)
        started = time.perf_counter()
        for _ in range(runs):
            Transformer(context).dump_sequence(params, formats)
        figures.append((time.perf_counter() - started) * 1e6 / runs)
    report.add(f"the statement's parameters, {events} event{'s' if events > 1 else ''}", figures[1], "µs",
               note=f"typed arrays; psycopg's list dumper {figures[0]:.1f} µs")


def run(args: argparse.Namespace) -> tuple[Report, Path]:
    report = Report({"suite": "groups", "levels": list(args.levels), "rounds": args.rounds, "seconds": args.seconds})
    settings = service_settings(args.service_setting)
    with bench_servers(args.database_url, args.nats_url) as servers, servers.fresh_database(False) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-groups-") as workdir:
        migrate(PostgresTarget(url))
        metrics_port = free_port()
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir),
                                       settings={**settings, "CHRONICLE_METRICS_PORT": str(metrics_port)})
        service.start()
        with service.stopped_afterwards():
            figures = asyncio.run(measure(servers.nats_url, service, metrics_port, args))
    for level, rounds in figures.items():
        rate, cpu, size, ms = (statistics.median(r[n] for r in rounds) for n in range(4))
        report.add(f"add_message, {level} in flight", rate, "msg/s",
                   note=f"service CPU {cpu:.0f} µs a message; {size:.1f} commands a group commit, {ms:.2f} ms each")
    for events in (1, 100):
        statement_parameters(report, events)
    points = [(r[2], r[1]) for rounds in figures.values() for r in rounds]
    if len({round(size, 1) for size, _ in points}) < 2:  # (one group size: no line to fit)
        return report, report.save()
    per_command, per_group = fitted(points)
    report.add("the service's CPU per command (fitted)", per_command, "µs")
    report.add("the service's CPU per group commit (fitted)", per_group, "µs",
               note="paid once a group: at 12 commands a group it adds " f"{per_group / 12:.0f} µs a message")
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench groups", description=__doc__.splitlines()[0])
    p.add_argument("--levels", type=lambda text: tuple(int(n) for n in text.split(",")), default=LEVELS,
                   help="requests in flight, comma-separated (default 1,4,12,32,100; the fit needs two or more)")
    p.add_argument("--rounds", type=int, default=2, help="rounds over the levels, alternating their order (default 2)")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds at each level a round (default 5)")
    add_server_options(p)
    add_service_setting_option(p)
    args = p.parse_args(argv)
    show(*run(args))


if __name__ == "__main__":
    main()
