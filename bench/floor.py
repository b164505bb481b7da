"""The floor under `./dev bench hitl`: what a signal's path costs on this machine at the least.

A bare Python process (nats-py and async psycopg, none of Chronicle's code) answers each
request by committing one row to Postgres and publishing one JetStream message, which
is timed as the HITL benchmark times a signal: from the request to the message's arrival
in a subscription's callback. Chronicle's figures read against these say how much of a
signal's time is Chronicle's own, and how much is the machine's (the commit's fsync,
loopback, and scheduling on the cores everything shares).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import nats
import psycopg
from nats.aio.msg import Msg

from adapters.messaging.jetstream import ensure_stream

SIGNAL_BYTES = 1_000  # about a paused signal with a short history


def stream_name(prefix: str) -> str:
    return prefix.replace(".", "_").upper() + "_FLOOR"  # removed with the instance's streams


async def serve(database_url: str, nats_url: str, prefix: str) -> None:
    """Answer `<prefix>.floor.cmd` requests (the payload is a run id) until stdin closes."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_stream(js, stream_name(prefix), [f"{prefix}.floor.signal.>"])
    conn = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    await conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, run_id text NOT NULL)")
    signal = b"x" * SIGNAL_BYTES

    async def answer(msg: Msg) -> None:
        run_id = msg.data.decode()
        await conn.execute("INSERT INTO bench_floor (run_id) VALUES (%s)", (run_id,), prepare=True)
        await js.publish(f"{prefix}.floor.signal.{run_id}", signal, headers={"Nats-Msg-Id": run_id})
        await msg.respond(b"ok")

    await nc.subscribe(f"{prefix}.floor.cmd", cb=answer)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # the benchmark closes it
    await conn.close()
    await nc.drain()


@contextmanager
def floor_process(database_url: str, nats_url: str, prefix: str) -> Iterator[None]:
    """The floor's process, answering until the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.floor", database_url, nats_url, prefix],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        if process.stdout is None or process.stdout.readline().strip() != "ready":
            raise RuntimeError("the floor process did not start")
        yield
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


async def measure(nc: nats.NATS, prefix: str, runs: int) -> list[float]:
    """Each run's request -> signal-arrival time in ms, one run after another."""
    latencies = []
    for n in range(runs):
        run_id = f"floor-{n}"
        arrived: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def on_signal(_: Msg, arrived: asyncio.Future[float] = arrived) -> None:
            if not arrived.done():
                arrived.set_result(time.perf_counter())

        subscription = await nc.subscribe(f"{prefix}.floor.signal.{run_id}", cb=on_signal)
        await nc.flush()
        started = time.perf_counter()
        await nc.request(f"{prefix}.floor.cmd", run_id.encode(), timeout=10)
        latencies.append((await asyncio.wait_for(arrived, 10) - started) * 1000)
        await subscription.unsubscribe()
    return latencies


if __name__ == "__main__":
    asyncio.run(serve(*sys.argv[1:4]))
