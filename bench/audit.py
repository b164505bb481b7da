"""`./dev bench audit`: hash-chain verification and export rates over a large store.

Seeds `--events` events (conversations and messages, sealed per owner as the service
writes them) straight into a fresh database, then times `chronicle audit verify --all`'s
walk (every chain recomputed in Python) and `chronicle export --all` (decrypted, one JSON
line per event, to /dev/null). Issue 7's aims: both above 50,000 events/s. Replay of a
10,000-event aggregate is `./dev bench snapshots`.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from adapters.store.export import ExportScope, export_events
from adapters.store.hash_chains import verify_chains
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget, migrate
from bench.report import Report, over, show
from bench.seed import Scale, seed
from bench.servers import add_server_options, bench_servers

RATE_AIM = 50_000.0


def run(events: int, database_url: str | None, keep: bool) -> tuple[Report, Path]:
    report = Report({"suite": "audit", "events": events})
    scale = Scale(users=max(1, events // 1_000), conversations=max(1, events // 20), messages=events)
    with bench_servers(database_url, None) as servers, servers.fresh_database(keep) as url:
        target = PostgresTarget(url)
        migrate(target)
        dataset = seed(target, scale)
        report.add("seeded", dataset.events, "events", note=f"{dataset.events / dataset.seconds:,.0f} events/s")
        with target.connect(autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE chronicle.events")

        started = time.perf_counter()
        chains = verify_chains(target)
        elapsed = time.perf_counter() - started
        assert chains.intact and chains.events == dataset.events, chains
        report.add("audit verify --all", chains.events / elapsed, "events/s", over(RATE_AIM),
                   note=f"{chains.events:,} events, {chains.streams:,} streams in {elapsed:.1f} s")

        started = time.perf_counter()
        with open("/dev/null", "wb") as sink, contextlib.closing(KeyRing(target)) as keys:
            written = export_events(target, keys, ExportScope(), sink)
        elapsed = time.perf_counter() - started
        assert written == dataset.events
        report.add("export --all", written / elapsed, "events/s", over(RATE_AIM),
                   note=f"{written:,} events decrypted and written in {elapsed:.1f} s")
        if keep:
            print(f"kept database: {url}")
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench audit", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000, help="events to seed (default 1,000,000)")
    p.add_argument("--quick", action="store_true", help="100,000 events")
    add_server_options(p, nats=False)
    p.add_argument("--keep", action="store_true", help="keep the bench database afterwards")
    args = p.parse_args(argv)
    show(*run(100_000 if args.quick else args.events, args.database_url, args.keep))
