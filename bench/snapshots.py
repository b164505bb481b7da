"""`./dev bench snapshots`: loading and auditing a 10,000-event aggregate, with and without snapshots.

Writes two conversations of `--events` events each (a start and its messages, sealed per
owner with a KeyRing as the service does) straight through the EventStore into a fresh
database; one also gets a snapshot every `--every` versions, of which the latest `--keep`
are kept (the service's defaults; 0 keeps all). Then times, p50 and
p95 over `--runs` runs each: `EventStore.load_many` of the whole aggregate (what the command
bus does on a cache miss) and the audit's `state_at` at version N-1 (snapshot + 499 events)
and at version N/2. The issue's aim: a replay under 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from uuid import UUID, uuid4

from adapters.read_side.queries import PostgresQueries, query_pool
from adapters.read_side.sealing import Seals
from adapters.store.audit_decoder import Decoder
from adapters.store.event_store import EventStore
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget, migrate
from bench.report import Report, percentile, show, timed, timed_async, under
from bench.seed import key_ring
from bench.servers import add_server_options, bench_servers
from domain.conversation import Conversation
from entrypoints.settings import Settings
from services.audit.queries import Audit
from services.runtime.cursors import CursorSeal

REPLAY_AIM_MS = 50.0
WRITE_BATCH = 1_000
START = datetime(2026, 1, 1, tzinfo=UTC)


def write_conversation(store: EventStore, events: int, every: int, keep: int = 0) -> UUID:
    """A conversation of `events` events, written in batches; a snapshot each `every` versions
    (0: none), the latest `keep` kept (0: all)."""
    owner = "bench-owner"
    conversation = Conversation.start(id=uuid4(), owner=owner, at=START, title="ten thousand messages")
    snapshots = []
    for n in range(1, events):
        conversation.add_message(
            message_id=uuid4(), at=START + timedelta(seconds=n), role="user" if n % 2 else "agent",
            content=f"message {n}: " + "the quick brown fox jumps over the lazy dog " * 4, metadata={"n": n},
        )
        if every and conversation.version % every == 0:
            snapshots.append(store.snapshot_codec.capture(conversation))
        if len(conversation.pending_events) >= WRITE_BATCH or n == events - 1:
            stored = [store.mapper.to_stored_event(e, owner) for e in conversation.collect_events()]
            store.recorder.record(stored)
    store.snapshots.save([store.snapshot_codec.seal(c) for c in snapshots], keep=keep)
    return conversation.id


def add(report: Report, name: str, times: list[float], aim: bool) -> None:
    report.add(f"{name} p50", percentile(times, 50), "ms", under(REPLAY_AIM_MS) if aim else None)
    report.add(f"{name} p95", percentile(times, 95), "ms")


async def measure_audit(url: str, keys: KeyRing, ids: dict[str, UUID], events: int, runs: int, report: Report) -> None:
    async with query_pool(url, max_size=2) as pool:  # the service's own kind
        audit = Audit(PostgresQueries(pool, cursors=CursorSeal.of_this_process(), sealing=Seals(keys)), record_read=None, decoder=Decoder(keys))  # type: ignore[arg-type]
        for version in (events - 1, events // 2):
            for label, conversation_id in ids.items():
                state, at = await audit.state_at(conversation_id, version, None)
                assert at == version and state.message_count == version - 1
                times = await timed_async(runs, partial(audit.state_at, conversation_id, version, None))
                add(report, f"audit state_at(version={version:,}), {label}", times, aim=label != "no snapshot")


def run(events: int, every: int, keep: int, runs: int, database_url: str | None) -> tuple[Report, Path]:
    report = Report({"suite": "snapshots", "events": events, "every": every, "keep": keep, "runs": runs})
    with bench_servers(database_url, None) as servers, servers.fresh_database(False) as url:
        target = PostgresTarget(url)
        migrate(target)
        keys = key_ring(target)
        store = EventStore(target, pool_size=2, keys=keys)
        try:
            started = time.perf_counter()
            ids = {"no snapshot": write_conversation(store, events, 0),
                   f"snapshots every {every}, keep {keep or 'all'}": write_conversation(store, events, every, keep)}
            report.details["write_seconds"] = round(time.perf_counter() - started, 2)
            for label, conversation_id in ids.items():
                loaded = store.load_many([conversation_id])[conversation_id]
                assert isinstance(loaded, Conversation)
                assert loaded.version == events and loaded.message_count == events - 1
                times = timed(runs, partial(store.load_many, [conversation_id]))
                add(report, f"load_many({events:,} events), {label}", times, aim=label != "no snapshot")
            asyncio.run(measure_audit(url, keys, ids, events, runs, report))
        finally:
            store.close()
            keys.close()
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench snapshots", description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=10_000, help="events per conversation (default 10,000)")
    p.add_argument("--every", type=int, default=Settings.model_fields["snapshot_every"].default,
                   help="versions between snapshots (default: the service's, 500)")
    p.add_argument("--keep", type=int, default=Settings.model_fields["snapshot_keep"].default,
                   help="latest snapshots kept (default: the service's, 3); 0 keeps all")
    p.add_argument("--runs", type=int, default=20, help="timed runs per measurement (default 20)")
    add_server_options(p, nats=False)
    args = p.parse_args(argv)
    show(*run(args.events, args.every, args.keep, args.runs, args.database_url))
