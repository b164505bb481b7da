"""The `chronicle` command line: serve, tokens, migrations, projections."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys

from services import logs
from services.settings import Settings

log = logging.getLogger("chronicle")


async def serve(settings: Settings) -> None:
    from services.bootstrap import bootstrap

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    chronicle = await bootstrap(settings)
    log.info(
        "ready",
        extra={
            "postgres": chronicle.target.describe(),
            "nats": chronicle.nats_url,
            "subjects": f"{settings.subject_prefix}.cmd.>, {settings.subject_prefix}.query.>",
            "endpoints": len(chronicle.subjects),
        },
    )
    await stop.wait()
    log.info("stopping: finishing in-flight requests")
    await chronicle.stop()
    log.info("stopped")


def token(settings: Settings, user: str, ttl: int) -> None:
    from services.bootstrap import authority_for

    print(authority_for(settings).issue(user, ttl_seconds=ttl))


@contextlib.contextmanager
def database(settings: Settings):  # type: ignore[no-untyped-def]
    """The configured database, or the embedded one `serve` uses; migrated."""
    from adapters.postgres import PostgresTarget, migrate
    from services.bootstrap import Servers

    servers = Servers(settings.model_copy(update={"nats_url": settings.nats_url or "unused"})).start()
    try:
        target = PostgresTarget(servers.database_url)
        migrate(target)
        yield target
    finally:
        servers.stop()


def projections_status(settings: Settings) -> None:
    from projections.engine import status
    from services.bootstrap import PROJECTIONS

    with database(settings) as target:
        rows = status(target, PROJECTIONS)
    print(f"{'projection':<12} {'position':>10} {'head':>10} {'lag':>8} {'version':>8}  updated")
    for r in rows:
        version = f"{r.version}" if r.version == r.code_version else f"{r.version}->{r.code_version}"
        print(f"{r.name:<12} {r.position:>10} {r.head:>10} {r.lag:>8} {version:>8}  {r.updated_at or '-'}")


def projections_rebuild(settings: Settings, names: list[str]) -> None:
    from tqdm import tqdm

    from projections.engine import rebuild_all
    from services.bootstrap import PROJECTIONS, projection_options

    unknown = set(names) - {p.name for p in PROJECTIONS} - {"all"}
    if unknown:
        sys.exit(f"unknown projection(s): {', '.join(sorted(unknown))}; known: {', '.join(p.name for p in PROJECTIONS)}")
    chosen = [p for p in PROJECTIONS if "all" in names or p.name in names]
    bars = {
        p.name: tqdm(desc=f"rebuild {p.name}", unit="pos", total=0, position=i, file=sys.stderr)
        for i, p in enumerate(chosen)
    }

    def progress(name: str, done: int, total: int) -> None:
        bars[name].total = total
        bars[name].n = done
        bars[name].refresh()

    with database(settings) as target:
        applied = rebuild_all(
            target,
            [(p, projection_options(settings, p)) for p in chosen],
            batch_size=settings.projection_batch_size,
            progress=progress,
        )
    for bar in bars.values():
        bar.close()
    for name, count in applied.items():
        print(f"{name}: rebuilt from {count} events")


def run_projections(settings: Settings) -> None:
    """Run only the projection engine (a dedicated projection worker), until SIGINT/SIGTERM."""
    import threading

    from projections.engine import ProjectionEngine
    from services.bootstrap import build_projections

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with database(settings) as target:
        engine = ProjectionEngine(
            target, build_projections(settings), settings.projection_batch_size, settings.read_model_vacuum_every
        )
        engine.start()
        log.info("projections running", extra={"postgres": target.describe()})
        with contextlib.suppress(KeyboardInterrupt):
            stopped.wait()
        engine.stop()


def migrate_command(settings: Settings) -> None:
    with database(settings):
        pass
    print("migrations applied")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chronicle",
        description="Chronicle: event-sourced memory for AI systems. Configured by CHRONICLE_* variables "
        "(CHRONICLE_DATABASE_URL, CHRONICLE_NATS_URL, ...); without URLs it starts embedded servers "
        "under ./.chronicle/.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the service in the foreground until SIGINT/SIGTERM")
    t = sub.add_parser("token", help="print a bearer token for USER (local HS256 secret)")
    t.add_argument("user")
    t.add_argument("--ttl", type=int, default=30 * 24 * 3600, help="lifetime in seconds (default 30 days)")
    sub.add_parser("migrate", help="apply pending database migrations")
    proj = sub.add_parser("projections", help="inspect or rebuild read models")
    psub = proj.add_subparsers(dest="projections_command", required=True, metavar="ACTION")
    psub.add_parser("status", help="each projection's position and lag")
    r = psub.add_parser("rebuild", help="rebuild read models from the first event (NAME or 'all')")
    r.add_argument("names", nargs="+", metavar="NAME")
    psub.add_parser("run", help="run the projection engine alone (no NATS)")
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    settings = Settings()
    logs.configure(settings.log_level)
    if args.command == "serve":
        asyncio.run(serve(settings))
    elif args.command == "token":
        token(settings, args.user, args.ttl)
    elif args.command == "migrate":
        migrate_command(settings)
    elif args.projections_command == "status":
        projections_status(settings)
    elif args.projections_command == "rebuild":
        projections_rebuild(settings, args.names)
    elif args.projections_command == "run":
        run_projections(settings)


if __name__ == "__main__":
    main()
