"""`python -m bench` (`./dev bench`): the command line of Chronicle's benchmark."""

from __future__ import annotations

import argparse
import importlib
import sys

from bench.report import show
from bench.run import Plan, run
from bench.seed import Scale
from bench.service import add_service_setting_option, service_settings

FULL = {"users": 100, "conversations": 20_000, "messages": 1_000_000, "samples": 1000, "duration": 30.0}
QUICK = {"users": 10, "conversations": 1_000, "messages": 50_000, "samples": 200, "duration": 10.0}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=(
            "Seed a history straight into a fresh database (chronicle_bench_<random>), start "
            "`chronicle serve` on it, then measure over NATS: latency of conversations.list, .get "
            "(100 messages), .search and add_message; sustained add_message throughput and the "
            "projection lag under it; the read models' initial build and full rebuild rates. "
            "Prints a table (metric | value | aim) and writes it as JSON to bench/results/."
        ),
        epilog="Defaults are the full scale (about 10-20 minutes on 2 cores); --quick takes about a minute. "
        "`python -m bench hitl --help`: the HITL signal latency benchmark; "
        "`python -m bench bus --help`: the closed bus's cost (connect, HITL, add_message) against an open one; "
        "`python -m bench fairness --help`: other users' latency while one user floods; "
        "`python -m bench optimization --help`: trial.record throughput and optimizations.history; "
        "`python -m bench snapshots --help`: loading and auditing a 10,000-event aggregate; "
        "`python -m bench audit --help`: hash-chain verification and export rates; "
        "`python -m bench erasure --help`: erasing a user and the key-encryption key rotation after it; "
        "`python -m bench artifacts --help`: artifacts.get, lineage, search and variation sets over 1M artifacts; "
        "`python -m bench jobs --help`: jobs/s, latency and pipeline overhead with 1, 2 and 4 job workers; "
        "`python -m bench gateway --help`: what the REST API adds over NATS; "
        "`python -m bench edges --help`: a victim's latency at the gateways under floods of half-sent requests and tokens; "
        "`python -m bench feed --help`: the event feed's rate, its follower's lag, and its cost; "
        "`python -m bench outage --help`: how fast requests fail while Postgres is stopped and work once it is back; "
        "`python -m bench faults --help`: a NATS cluster node or a service instance killed under load; "
        "`python -m bench scale --help`: 1, 2 and 3 service instances on a loopback NATS cluster; "
        "`python -m bench rebuild --help`: rebuilding every read model in one pass with a helper process, against one process and a pass each; "
        "`python -m bench console --help`: the web console's bundle size, inbox time to interactive and pause-to-shown latency; "
        "`python -m bench anchors --help`: Chronicle beside a bare NATS responder and the card's stack used plainly; "
        "`python -m bench groups --help`: the service's CPU per command and per group commit; "
        "`python -m bench pair --help`: this tree beside another commit's, side by side in alternating turns.",
    )
    scale = p.add_argument_group("scale")
    scale.add_argument("--quick", action="store_true",
                       help="small preset for a fast check: 10 users, 1,000 conversations, 50,000 messages")
    scale.add_argument("--users", type=int, help=f"users owning the conversations (default {FULL['users']:,})")
    scale.add_argument("--conversations", type=int, help=f"conversations seeded (default {FULL['conversations']:,})")
    scale.add_argument("--messages", type=int, help=f"messages seeded (default {FULL['messages']:,})")
    scale.add_argument("--seed", type=int, default=1, help="random seed: the same seed seeds the same history")
    scale.add_argument("--batch-size", type=int, default=5_000, help="events per seeding transaction (default 5,000)")

    load = p.add_argument_group("load")
    load.add_argument("--samples", type=int,
                      help="measured requests per latency metric (default 1,000; 200 with --quick)")
    load.add_argument("--duration", type=float,
                      help="seconds of sustained add_message load (default 30; 10 with --quick)")
    load.add_argument("--concurrency", type=int, default=128,
                      help="add_message requests in flight during the sustained load (default 128)")
    load.add_argument("--max-requests", type=int, default=300_000,
                      help="upper bound on sustained-load requests, whatever the duration (default 300,000)")
    load.add_argument("--active", type=int, default=1_000,
                      help="conversations that receive the new messages (default 1,000)")
    load.add_argument("--phase-time-limit", type=float, default=180.0,
                      help="seconds after which a latency phase stops early (default 180)")
    load.add_argument("--build-timeout", type=float, default=3600.0,
                      help="seconds to wait for the read models' initial build (default 3600)")

    where = p.add_argument_group("servers")
    where.add_argument("--database-url",
                       help="a PostgreSQL URL to CREATE DATABASE from (default: 127.0.0.1:5432 when it "
                            "answers, else an embedded server)")
    where.add_argument("--nats-url", help="NATS URL (default: 127.0.0.1:4222 when it answers, else embedded)")
    where.add_argument("--keep", action="store_true",
                       help="keep the bench database afterwards (for EXPLAIN ANALYZE); its URL is printed")
    add_service_setting_option(p)
    return p


def plan_from(args: argparse.Namespace) -> Plan:
    """The preset (full or --quick), with any value given on the command line instead."""
    given = {name: value for name, value in vars(args).items() if name in FULL and value is not None}
    chosen = {**(QUICK if args.quick else FULL), **given}
    return Plan(
        scale=Scale(users=int(chosen["users"]), conversations=int(chosen["conversations"]),
                    messages=int(chosen["messages"])),
        seed=args.seed,
        batch_size=args.batch_size,
        samples=int(chosen["samples"]),
        duration=float(chosen["duration"]),
        concurrency=args.concurrency,
        max_requests=args.max_requests,
        active=args.active,
        phase_time_limit=args.phase_time_limit,
        build_timeout=args.build_timeout,
        database_url=args.database_url,
        nats_url=args.nats_url,
        keep=args.keep,
        service_settings=service_settings(args.service_setting),
    )


# `./dev bench NAME [ARGS]`: benchmarks with their own options, each a module with main(argv).
SUITES = {
    "hitl": "bench.hitl",  # HITL signal latency
    "bus": "bench.bus",  # what the closed bus costs: open vs closed nats-server side by side
    "fairness": "bench.fairness",  # other users' latency while one user floods (default limits)
    "optimization": "bench.optimization",  # trial.record throughput, optimizations.history
    "snapshots": "bench.snapshots",  # loading and auditing a 10,000-event aggregate
    "audit": "bench.audit",  # hash-chain verification and export rates
    "erasure": "bench.erasure",  # erase-user and the key-encryption key rotation after it
    "artifacts": "bench.artifacts",  # artifacts.get, lineage, search, variation sets over 1M artifacts
    "jobs": "bench.jobs",  # jobs/s, latency and pipeline overhead with 1, 2, 4 job workers
    "gateway": "bench.gateway",  # what the REST API adds over NATS: reads p50/p95, writes/s
    "edges": "bench.edges",  # a victim's p50/p99 at the REST and MCP gateways under each gateway attack, beside idle
    "feed": "bench.feed",  # the event feed: events/s, follower lag, add_message with it on and off
    "outage": "bench.outage",  # requests while Postgres is stopped, and the first one after it is back
    "faults": "bench.faults",  # a NATS node or a service instance killed under load: nothing lost or duplicated
    "scale": "bench.scale",  # add_message and query figures with 1, 2, 3 instances on a loopback NATS cluster
    "rebuild": "bench.rebuild",  # rebuild all read models: with a helper process, in one, a pass each; then verify
    "console": "bench.console",  # the web console: bundle size, inbox time to interactive, pause -> shown p50/p99
    "anchors": "bench.anchors",  # add_message and reads beside a bare NATS responder and the card's stack used plainly
    "groups": "bench.groups",  # the service's CPU per command and per group commit, from 1 to 100 in flight
    "pair": "bench.pair",  # this tree beside another commit's: writes, reads and CPU in alternating turns
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in SUITES:  # `./dev bench hitl ...`: a suite of its own
        importlib.import_module(SUITES[argv[0]]).main(argv[1:])
        return
    args = parser().parse_args(argv)
    plan = plan_from(args)
    try:
        plan.scale.check()
    except ValueError as error:
        sys.exit(f"bad scale: {error}")
    show(*run(plan))


if __name__ == "__main__":
    main()
