"""`./dev bench pair --base REV`: this tree beside another commit's, in alternating bursts.

These machines drift: their speed moves by 10–40% within minutes, so two runs of a
benchmark minutes apart compare the machine more than the code. This starts two `chronicle
serve` (per-user limits off) side by side on one Postgres and one NATS, each on a fresh
database of its own: one runs this tree, the other REV's (a git worktree made for the run and
removed after it, or a directory given as REV), and drives them in turns, A B then B A, a few
seconds each, so both see the same machine. A turn is add_message at 100 in flight from one
connection to 100 conversations (chat drawn from bench/corpus.py, the same texts in the same
order for both, so the search read model does a real text's work), then conversations.get
of another conversation, of 100 messages, and conversations.list, one at a time. For each
turn it reads from /proc the CPU of the service, of its child processes (projections, the
event feed) and of its database's Postgres backends, and prints the medians of both sides
with the median of the turns' ratios (this tree over the base's, paired within a round).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from uuid import UUID

from chronicle_client.connection import ChronicleClient

from adapters.store.postgres import PostgresTarget
from bench.corpus import Corpus
from bench.cpu import CpuMeter
from bench.gateway import throughput
from bench.load import sequential
from bench.report import Report, percentile, show
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess, add_service_setting_option, service_settings

HERE = Path(__file__).resolve().parent.parent
SIDES = ("this tree", "base")
IN_FLIGHT = 100
CONVERSATIONS = 100
READ_MESSAGES = 100
TEXTS = 20_000  # distinct messages, written in turn

# (figure, unit, lower is better)
FIGURES = (
    ("add_message/s, 100 in flight", "msg/s", False),
    ("CPU per add_message: service", "µs", True),
    ("CPU per add_message: projections and feed", "µs", True),
    ("CPU per add_message: postgres", "µs", True),
    ("CPU per add_message: machine", "µs", True),
    ("conversations.get (100 messages) p50", "ms", True),
    ("conversations.get: service CPU per read", "µs", True),
    ("conversations.list p50", "ms", True),
    ("conversations.list: service CPU per read", "µs", True),
)


def chat(count: int = TEXTS, seed: int = 7) -> list[str]:
    """The messages both sides write, user's and agent's alternately, in this order."""
    corpus = Corpus(random.Random(seed))
    return [corpus.message("user" if n % 2 == 0 else "agent")[0] for n in range(count)]


@contextlib.contextmanager
def tree_of(base: str) -> Iterator[Path]:
    """The source tree of `base`: a directory as it is, else a worktree of that commit made
    for the run (removed afterwards)."""
    given = Path(base)
    if given.is_dir():
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="chronicle-bench-pair-") as scratch:
        tree = Path(scratch) / "base"
        subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", str(tree), base],
                       check=True, capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)], check=False)


class Side:
    """One service under test, with its client, conversations and the one it reads."""

    def __init__(self, service: ServiceProcess, texts: list[str]):
        self.service = service
        self.texts = itertools.cycle(texts)
        self.meter = CpuMeter(service.pid, str(PostgresTarget(service.database_url).params["dbname"]))
        self.figures: dict[str, list[float]] = {name: [] for name, _, _ in FIGURES}
        self.client: ChronicleClient | None = None
        self.conversations: list[UUID] = []  # written to
        self.read_id: UUID | None = None  # read (never written to during the turns)

    async def open(self, nats_url: str) -> None:
        self.client = client = await ChronicleClient.connect(
            nats_url, self.service.token("pair-bench"), prefix=self.service.subject_prefix, timeout=30
        )
        self.conversations = [(await client.conversations.start(title="pair bench")).conversation_id
                              for _ in range(CONVERSATIONS)]
        read_id = self.read_id = (await client.conversations.start(title="pair bench, the one read")).conversation_id
        for n in range(READ_MESSAGES):
            await client.conversations.add_message(read_id, "user", f"note {n} of the pair bench")
        while len((await client.conversations.get(read_id)).messages) < READ_MESSAGES:
            await asyncio.sleep(0.05)  # (the read model catching up)

    async def turn(self, seconds: float) -> None:
        client, read_id = self.client, self.read_id
        assert client is not None and read_id is not None
        sent = itertools.count()

        async def add() -> None:  # (the conversations in turn)
            await client.conversations.add_message(self.conversations[next(sent) % CONVERSATIONS], "user",
                                                   next(self.texts))

        self.meter.start()
        rate = await throughput(add, IN_FLIGHT, seconds)
        used = self.meter.stop()
        per_message = 1e6 / rate  # µs of a core's second per message
        self.figures["add_message/s, 100 in flight"].append(rate)
        for name, group in (("service", "service"), ("projections and feed", "projections"),
                            ("postgres", "postgres"), ("machine", "machine")):
            self.figures[f"CPU per add_message: {name}"].append(used.get(group, 0.0) * per_message)
        reads: dict[str, Callable[[], Awaitable[object]]] = {
            "conversations.get": lambda: client.conversations.get(read_id),
            "conversations.list": lambda: client.conversations.list(),
        }
        for name, read in reads.items():
            self.meter.start()
            done = await sequential(name, read, count=10**9, time_limit=seconds / 2, warmup=5)
            used = self.meter.stop()
            label = "conversations.get (100 messages)" if name == "conversations.get" else name
            self.figures[f"{label} p50"].append(percentile(done.latencies_ms, 50))
            self.figures[f"{name}: service CPU per read"].append(
                used.get("service", 0.0) * done.seconds * 1e6 / max(len(done.latencies_ms), 1)
            )


async def measure(nats_url: str, sides: list[Side], rounds: int, seconds: float) -> None:
    for side in sides:
        await side.open(nats_url)
    try:
        for side in sides:  # (warm: statements prepared, aggregates cached)
            await side.turn(1.0)
            for values in side.figures.values():
                values.clear()
        for n in range(rounds):
            for side in sides if n % 2 == 0 else reversed(sides):
                print(f"round {n + 1}/{rounds}: {SIDES[sides.index(side)]}", flush=True)
                await side.turn(seconds)
    finally:
        for side in sides:
            if side.client is not None:
                await side.client.close()


def run(args: argparse.Namespace) -> tuple[Report, Path]:
    report = Report({"suite": "pair", "base": args.base, "rounds": args.rounds, "seconds": args.seconds})
    settings = service_settings(args.service_setting)
    with (tree_of(args.base) as base_tree,
          bench_servers(args.database_url, args.nats_url) as servers,
          tempfile.TemporaryDirectory(prefix="chronicle-bench-pair-") as workdir,
          servers.fresh_database(False) as this_url,
          servers.fresh_database(False) as base_url,
          contextlib.ExitStack() as running):
        services = []
        for name, url, tree in (("this", this_url, HERE), ("base", base_url, base_tree)):
            (Path(workdir) / name).mkdir()
            path = {"PYTHONPATH": f"{tree}:{tree / 'clients' / 'python'}"}  # (before the editable installs)
            service = ServiceProcess.fresh(url, servers.nats_url, Path(workdir) / name, settings={**settings, **path})
            service.start()  # (each migrates its own database with its own tree)
            running.enter_context(service.stopped_afterwards())
            services.append(service)
        texts = chat()
        sides = [Side(service, texts) for service in services]
        started = time.perf_counter()
        asyncio.run(measure(servers.nats_url, sides, args.rounds, args.seconds))
    this, base = (side.figures for side in sides)
    for name, unit, _ in FIGURES:
        ratios = [a / b for a, b in zip(this[name], base[name], strict=True) if b]
        report.add(name, statistics.median(this[name]), unit, note=(
            f"base {statistics.median(base[name]):,.1f}; this / base {statistics.median(ratios):.3f} "
            f"(turns {min(ratios):.3f}–{max(ratios):.3f})"
        ))
    report.details.update(this=this, base=base, seconds=time.perf_counter() - started)
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench pair", description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True, help="a commit (a worktree of it is made for the run) or a directory")
    p.add_argument("--rounds", type=int, default=6, help="rounds of a turn each, alternating who goes first (default 6)")
    p.add_argument("--seconds", type=float, default=4.0,
                   help="seconds of add_message a turn; the reads take as long again (default 4)")
    add_server_options(p)
    add_service_setting_option(p)
    show(*run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
