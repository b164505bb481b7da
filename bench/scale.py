"""`./dev bench scale`: add_message throughput and query latency with 1, 2 and 3 service instances.

On the loopback three-node NATS cluster of the fault scenarios (infra/nats/cluster.conf,
closed bus, streams replicated 3 times), instance n connected to node n, all sharing one
Postgres; the first instance runs the projection engine, the others none. For each count
in turn, from a fresh database: `--users` writers keep `--in-flight` add_message requests
going for `--seconds` (each request in flight on a conversation of its own), while one reader times conversations.list back to back. Then the
time from a node kill to the first successful command of a client that was on it.
Prints one table. On two cores every process shares the same CPUs: what the figures show
is the cost of going through more instances and nodes, not the capacity of more machines
(see the note printed with the table).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from pathlib import Path
from uuid import UUID

from chronicle_client.connection import ChronicleClient

from adapters.store.postgres import PostgresTarget, migrate
from bench.cluster import NatsCluster
from bench.faults import until_ok
from bench.load import sustained
from bench.report import Report, percentile
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess, unreported


async def measure(cluster: NatsCluster, first: ServiceProcess, users: int, in_flight: int, seconds: float) -> dict[str, float]:
    url = cluster.users_url()
    clients = [await ChronicleClient.connect(url, first.token(f"writer-{n}"), prefix=first.subject_prefix)
               for n in range(users)]
    reader = await ChronicleClient.connect(url, first.token("reader"), prefix=first.subject_prefix)
    try:
        # One conversation per caller, as in a chat product, where a conversation has one writer
        # at a time: callers sharing a few hot conversations across instances would measure
        # their version conflicts (each instance's cached copy goes stale), not the fleet.
        free: asyncio.Queue[tuple[ChronicleClient, UUID]] = asyncio.Queue()
        for n in range(in_flight):
            client = clients[n % users]
            free.put_nowait((client, (await client.conversations.start(title=f"scale {n}")).conversation_id))
        await reader.conversations.start(title="read me")

        async def add_message() -> int:
            client, conversation_id = free.get_nowait()
            try:
                reply = await client.conversations.add_message(conversation_id, "user", "a message of the scale bench")
            finally:
                free.put_nowait((client, conversation_id))
            return reply.position or 0

        listed: list[float] = []
        writing = True

        async def read() -> None:
            while writing:
                started = time.perf_counter()
                await reader.conversations.list(limit=20)
                listed.append((time.perf_counter() - started) * 1000)

        reading = asyncio.create_task(read())
        written = await sustained("add_message", add_message, concurrency=in_flight, duration=seconds,
                                  max_requests=10**9)
        writing = False
        await reading
        return {
            "add_message msg/s": written.throughput,
            "add_message p95 ms": percentile(written.latencies_ms, 95),
            "conversations.list p50 ms": percentile(listed, 50),
            "conversations.list p95 ms": percentile(listed, 95),
        }
    finally:
        for client in [*clients, reader]:
            await client.close()


async def node_kill(cluster: NatsCluster, first: ServiceProcess, node: int) -> float:
    """Seconds from killing `node` to the first ok of a client that was connected to it."""
    client = await ChronicleClient.connect(
        cluster.users_url(first=node), first.token("after-kill"), prefix=first.subject_prefix, timeout=2.0,
        nats_options={"dont_randomize": True, "max_reconnect_attempts": -1, "reconnect_time_wait": 0.1,
                      "error_cb": unreported},
    )
    try:
        conversation_id = (await client.conversations.start(title="kill")).conversation_id
        killed_at = time.monotonic()
        await asyncio.to_thread(cluster.nodes[node].kill)
        await until_ok(lambda: client.conversations.add_message(conversation_id, "user", "after", idempotency_key="k"))
        return time.monotonic() - killed_at
    finally:
        await client.close()


def one_count(instances: int, database_url: str, workdir: Path, users: int, in_flight: int, seconds: float,
              kill: bool) -> dict[str, float]:
    with NatsCluster(workdir / "cluster").running() as cluster, contextlib.ExitStack() as stack:
        services: list[ServiceProcess] = []
        for n in range(instances):
            settings = {**cluster.service_settings(n), "CHRONICLE_PROJECTION_PROCESS": "true"}
            if n > 0:
                settings["CHRONICLE_RUN_PROJECTIONS"] = "false"
            service = (
                ServiceProcess.fresh(database_url, cluster.service_url(), workdir / "service-1", settings) if n == 0
                else ServiceProcess(database_url, cluster.service_url(), services[0].subject_prefix,
                                    services[0].jwt_secret, workdir / f"service-{n + 1}", settings=settings)
            )
            service.workdir.mkdir(parents=True)
            service.start()
            stack.enter_context(service.stopped_afterwards())
            services.append(service)
        figures = asyncio.run(measure(cluster, services[0], users, in_flight, seconds))
        if kill:
            figures["node kill -> first ok s"] = asyncio.run(node_kill(cluster, services[0], cluster.size - 1))
        return figures


def run(counts: list[int], users: int, in_flight: int, seconds: float, database_url: str | None) -> Report:
    report = Report({"suite": "scale", "instances": counts, "users": users, "in_flight": in_flight, "seconds": seconds})
    with bench_servers(database_url, None) as servers, tempfile.TemporaryDirectory(prefix="chronicle-scale-") as w:
        for count in counts:
            print(f"{count} instance(s)", flush=True)
            with servers.fresh_database(False) as url:
                migrate(PostgresTarget(url))
                figures = one_count(count, url, Path(w) / str(count), users, in_flight, seconds, kill=count == counts[-1])
            for metric, value in figures.items():
                report.add(f"{metric}, {count} instance(s)", value)
    return report


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, nargs="+", default=[1, 2, 3], help="instance counts (default 1 2 3)")
    p.add_argument("--users", type=int, default=8, help="writing users, each on its own connection (default 8)")
    p.add_argument("--in-flight", type=int, default=64, help="add_message requests in flight (default 64)")
    p.add_argument("--seconds", type=float, default=15.0, help="seconds of load per count (default 15)")
    add_server_options(p, nats=False)
    args = p.parse_args(argv)
    report = run(args.instances, args.users, args.in_flight, args.seconds, args.database_url)
    print(report.table())
    print("On one machine every instance, node and Postgres share its cores: more instances add hops and "
          "processes, not CPUs. Across machines, capacity grows with instances until Postgres's single "
          "writer (group commit) or its fsync rate is the limit.")
    print(f"saved {report.save()}")


if __name__ == "__main__":
    main()
