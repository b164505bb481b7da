"""`./dev bench erasure`: how long erasing a user takes, and the key-encryption key rotation after it.

Seeds `--events` events of `--users` users (sealed per owner as the service writes them)
straight into a fresh database, starts Chronicle as `chronicle erase-user` does (through
the command bus: no NATS), then times, for one user: the erasure (the `DataSubject.Erased`
event, the key destroyed, the user's replies and blobs deleted and the tables vacuumed)
and the rotation that follows it (a new KEK generation, every live data key wrapped again,
the old generation destroyed). The rotation's cost grows with the users (keys), not the events.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from adapters.store.kek_rotation import PostgresKeyRotation
from adapters.store.postgres import PostgresTarget, migrate
from adapters.store.user_data import PostgresUserData
from bench.report import Report, show
from bench.seed import Scale, seed
from bench.servers import add_server_options, bench_servers
from entrypoints.bootstrap import Stage, build
from entrypoints.settings import Settings
from services.users.erasure import erase_user


def run(events: int, users: int, database_url: str | None, keep: bool) -> tuple[Report, Path]:
    report = Report({"suite": "erasure", "events": events, "users": users})
    scale = Scale(users=users, conversations=max(users, events // 20), messages=events)
    with bench_servers(database_url, None) as servers, servers.fresh_database(keep) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-erasure-") as data_dir:
        target = PostgresTarget(url)
        migrate(target)
        dataset = seed(target, scale)
        report.add("seeded", dataset.events, "events", note=f"{dataset.users and len(dataset.users)} users")
        chronicle = build(Settings(database_url=url, data_dir=Path(data_dir), log_level="WARNING"))
        asyncio.run(chronicle.start(through=Stage.BUS))
        try:
            started = time.perf_counter()
            asyncio.run(erase_user(chronicle.bus, chronicle.keys, PostgresUserData(chronicle.target), dataset.users[0], "bench"))
            erased = time.perf_counter() - started
            started = time.perf_counter()
            assert PostgresKeyRotation(chronicle.target, chronicle.keks).rotate()
            rotated = time.perf_counter() - started
        finally:
            asyncio.run(chronicle.stop())
        report.add("erase-user", erased * 1000, "ms", note="event, key destroyed, replies and blobs deleted, vacuums")
        report.add("KEK rotation", rotated * 1000, "ms", note=f"{users:,} keys wrapped again, old KEK destroyed")
        report.add("erasure + rotation", (erased + rotated) * 1000, "ms")
        if keep:
            print(f"kept database: {url}")
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench erasure", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000, help="events to seed (default 10,000)")
    p.add_argument("--users", type=int, default=100, help="users owning them, each with a data key (default 100)")
    add_server_options(p, nats=False)
    p.add_argument("--keep", action="store_true", help="keep the bench database afterwards")
    args = p.parse_args(argv)
    show(*run(args.events, args.users, args.database_url, args.keep))
