"""`./dev bench hitl`: HITL signal latency over loopback, pause -> paused and resume -> resumed.

Starts `chronicle serve` on a fresh database, then for each run: subscribes to the run's
signal subjects (the owner's own: clients/python/chronicle_contract/hitl.py run_signals), pauses, times the
arrival of the `paused` signal (in the subscription's callback), resumes, times `resumed`.
Also times an orchestrator's whole `wait_for_resume` (the answer taken with hitl.take),
add_message one at a time by turns without and with an Idempotency-Key, and then the
floor (bench/floor.py): a bare process that commits a row and publishes a message per
request, timed the same way.
Prints a table; the aim is p99 under 5 ms for each signal (#33; #3 asked for 10).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import tempfile
import time
from pathlib import Path

from chronicle_client.connection import ChronicleClient
from chronicle_contract.bus import signals_prefix
from chronicle_contract.hitl import run_signals
from nats.aio.msg import Msg

from adapters.store.postgres import PostgresTarget, migrate
from bench import floor
from bench.report import Report, show, under
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess, add_service_setting_option, service_settings

SIGNAL_AIM_MS = 5.0
RUNS_PER_CONVERSATION = 10


class Arrival:
    """When a subject's first message arrived: taken in the subscription's callback, not
    when the benchmark, busy awaiting the command's reply, gets round to reading it."""

    def __init__(self) -> None:
        self.at = asyncio.get_running_loop().create_future()

    async def arrived(self, message: Msg) -> None:
        if not self.at.done():
            self.at.set_result(time.perf_counter())

    async def wait(self, timeout: float = 10.0) -> float:
        return await asyncio.wait_for(self.at, timeout)


async def measure(client: ChronicleClient, runs: int, report: Report) -> None:
    paused_ms: list[float] = []
    resumed_ms: list[float] = []
    waited_ms: list[float] = []
    conversation_id = None
    for n in range(runs):
        if n % RUNS_PER_CONVERSATION == 0:
            conversation_id = (await client.conversations.start(title=f"hitl bench {n}")).conversation_id
            await client.conversations.add_message(conversation_id, "user", "generate a square sunset")
        run_id = f"bench-{secrets.token_hex(8)}"
        paused_at, resumed_at = Arrival(), Arrival()
        signals = run_signals(signals_prefix(client.prefix, client.user or ""), run_id)
        paused = await client.nc.subscribe(f"{signals}.paused", cb=paused_at.arrived)
        resumed = await client.nc.subscribe(f"{signals}.resumed", cb=resumed_at.arrived)
        await client.nc.flush()

        started = time.perf_counter()
        handle = await client.hitl.pause(
            conversation_id, step="render", checkpoint_type="approval", prompt="Approve?", run_id=run_id
        )
        paused_ms.append((await paused_at.wait() - started) * 1000)

        waiting = asyncio.create_task(handle.wait_for_resume(timeout=10))
        await asyncio.sleep(0.005)  # the orchestrator is waiting before the person answers
        started = time.perf_counter()
        await client.hitl.resume(run_id, approved=True, feedback="looks good")
        resumed_ms.append((await resumed_at.wait() - started) * 1000)
        await waiting
        waited_ms.append((time.perf_counter() - started) * 1000)
        await paused.unsubscribe()
        await resumed.unsubscribe()
    report.add_percentiles("pause -> paused signal", paused_ms, aim_p99=under(SIGNAL_AIM_MS), note=f"{runs:,} runs")
    report.add_percentiles("resume -> resumed signal", resumed_ms, aim_p99=under(SIGNAL_AIM_MS))
    report.add_percentiles("resume -> wait_for_resume returned", waited_ms, note="the answer taken with hitl.take")
    await keyed_or_not(client, runs, report)


async def keyed_or_not(client: ChronicleClient, runs: int, report: Report) -> None:
    """add_message one at a time, by turns without and with an Idempotency-Key (so both meet
    the machine alike): what a caller's key costs a command."""
    conversation_id = (await client.conversations.start(title="hitl bench, keys")).conversation_id
    times: dict[bool, list[float]] = {False: [], True: []}
    for n in range(2 * runs):
        keyed = n % 2 == 1
        started = time.perf_counter()
        await client.conversations.add_message(conversation_id, "user", "a message",
                                               idempotency_key=secrets.token_hex(16) if keyed else None)
        times[keyed].append((time.perf_counter() - started) * 1000)
    report.add_percentiles("add_message, one at a time", times[False])
    report.add_percentiles("add_message with an Idempotency-Key, one at a time", times[True])


def run(runs: int, database_url: str | None, nats_url: str | None,
        settings: dict[str, str] | None = None) -> tuple[Report, Path]:
    report = Report({"suite": "hitl", "runs": runs, "service_settings": settings or {}})
    with bench_servers(database_url, nats_url) as servers, servers.fresh_database(False) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-hitl-") as workdir:
        migrate(PostgresTarget(url))
        service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir), settings)
        service.start()
        try:
            async def drive() -> None:
                token = service.token("hitl-bench")
                async with await ChronicleClient.connect(
                    servers.nats_url, token, prefix=service.subject_prefix
                ) as client:
                    await measure(client, runs, report)
                    with floor.floor_process(url, servers.nats_url, service.subject_prefix):
                        report.add_percentiles(
                            "floor: bare request -> commit -> JetStream publish",
                            await floor.measure(client.nc, service.subject_prefix, runs),
                            note="no Chronicle code: what this machine gives at the least",
                        )

            asyncio.run(drive())
        finally:
            service.stop()
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench hitl", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000, help="pause/resume round trips (default 1,000)")
    add_server_options(p)
    add_service_setting_option(p)
    args = p.parse_args(argv)
    show(*run(args.runs, args.database_url, args.nats_url, service_settings(args.service_setting)))
