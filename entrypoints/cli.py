"""The `chronicle` command line: serve, tokens, migrations, projections."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any, TypeVar

import uvloop  # (the service's and the gateways' loop: they are all sockets, parsing and callbacks)
from chronicle_contract.audit import AUDITOR
from chronicle_contract.bus import DURABLES_CLAIM
from chronicle_contract.events import FEED_ROLE
from chronicle_contract.limits import BULK_ROLE

from entrypoints import heap, logs
from entrypoints.settings import Settings, SetupError, load_settings
from services.users.erasure import ADMIN

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Iterator

    from adapters.metrics import GatewayMetrics, MetricsEndpoint
    from adapters.store.postgres import PostgresTarget
    from entrypoints.bootstrap import Chronicle, Stage
    from entrypoints.gateways.http_guard import HttpLimits
    from entrypoints.gateways.http_server import HttpServer
    from entrypoints.gateways.local_sign_in import LocalSignIn
    from projections.view import Projection
    from services.ports.read_models import Queries

log = logging.getLogger("chronicle")
Report = TypeVar("Report")
ROLES = (AUDITOR, ADMIN, BULK_ROLE, FEED_ROLE)  # the roles something checks for; a token names only these


def stop_on_signals() -> asyncio.Event:
    """An event SIGINT and SIGTERM set, from now on (during a start too)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def unless_stopped(work: Coroutine[Any, Any, Any], stop: asyncio.Event) -> bool:
    """Run `work` to its end (True), unless `stop` is set first: then it is cancelled (its
    own clean-up runs) and the answer is False."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()  # (raises what the work raised)
    return True


def check_port_free(host: str, port: int, variable: str, hint: str = "") -> None:
    """Fail before anything starts when a port this process must listen on is taken."""
    from adapters.embedded import port_free

    if port and not port_free(host, port):
        raise SetupError(f"port {port} on {host} is in use ({variable}): stop what listens there, or set {variable} "
                         f"to another port{hint}")


async def serve(settings: Settings) -> None:
    from entrypoints.bootstrap import build

    stop = stop_on_signals()
    check_port_free(settings.http_host, settings.http_port, "CHRONICLE_HTTP_PORT", " (0: no REST API)")
    chronicle = build(settings)
    metrics = metrics_endpoint(settings, chronicle)  # from the start: a long first build shows its progress
    http = None
    try:
        if not await unless_stopped(chronicle.start(), stop):
            log.info("stopped while starting")
            return
        if settings.http_port:
            http = await rest_server(settings, chronicle.nats_url, gateway_metrics(chronicle))
        heap.settle()
        log.info(
            "ready",
            extra={
                "postgres": chronicle.target.describe(),
                "nats": chronicle.nats_url,
                "subjects": f"{settings.subject_prefix}.cmd.>, {settings.subject_prefix}.query.>",
                "endpoints": len(chronicle.subjects),
                "http": http.url if http else None,
                "metrics": metrics.url if metrics else None,
                "rebuilding": chronicle.rebuilding,  # read models behind the log while a rebuild runs
                "search": semantic_search(chronicle),
            },
        )
        await stop.wait()
        log.info("stopping: finishing in-flight requests")
        if http is not None:
            await http.stop()
        await chronicle.stop()
        log.info("stopped")
    finally:  # (also after a failed or interrupted start: nothing it started is left running)
        await chronicle.stop()
        if metrics is not None:
            await asyncio.to_thread(metrics.stop)


async def rest_server(settings: Settings, nats_url: str, metrics: GatewayMetrics) -> HttpServer:
    """The REST API on settings.http_port, its users reaching the service over `nats_url`."""
    from entrypoints.gateways.clients import UserClients
    from entrypoints.gateways.console import with_console
    from entrypoints.gateways.http_server import HttpServer
    from entrypoints.gateways.rest import build_app

    clients = UserClients(nats_url, settings.subject_prefix)
    app = with_console(build_app(clients, cors_origins=settings.http_cors_origins, metrics=metrics), clients,
                       local_sign_in(settings))
    return await HttpServer(app, settings.http_host, settings.http_port, http_limits(settings)).start()


def local_sign_in(settings: Settings) -> LocalSignIn:
    """The console's loopback one-click sign-in: on with the embedded default's token secret
    (kept under the data dir by `chronicle serve`), or as CHRONICLE_CONSOLE_LOCAL_SIGN_IN says."""
    from adapters.auth import TokenAuthority
    from entrypoints.gateways.local_sign_in import LocalSignIn

    issuer = None
    embedded = not settings.jwt_secret and not settings.jwt_public_key
    if settings.console_local_sign_in is not False:
        if settings.jwt_secret and settings.console_local_sign_in:
            issuer = TokenAuthority(secret=settings.jwt_secret)
        elif embedded and (settings.data_dir / "jwt_secret").is_file():
            issuer = TokenAuthority.local(settings.data_dir)
    return LocalSignIn(issuer, settings.console_local_user, settings.console_local_ttl)


def http_limits(settings: Settings) -> HttpLimits:
    """What the HTTP gateways allow a connection (entrypoints/gateways/http_guard.py)."""
    from entrypoints.gateways.http_guard import HttpLimits

    return HttpLimits(header_timeout=settings.http_header_timeout, body_timeout=settings.http_body_timeout,
                      max_connections=settings.http_max_connections,
                      max_per_address=settings.http_max_connections_per_address)


def gateway_metrics(chronicle: Chronicle) -> GatewayMetrics:
    """The REST API in the service's own process: its figures in the service's registry."""
    from adapters.metrics import GatewayMetrics

    return GatewayMetrics(chronicle.metrics.registry)


def metrics_endpoint(settings: Settings, chronicle: Chronicle) -> MetricsEndpoint | None:
    """/metrics on settings.metrics_port (None when 0); a port already taken is logged and left."""
    from adapters.metrics import MetricsEndpoint

    if not settings.metrics_port:
        return None
    return MetricsEndpoint(chronicle.metrics.registry, settings.metrics_host, settings.metrics_port).start()


async def serve_gateway(settings: Settings, kind: str) -> None:
    """`chronicle http` / `chronicle mcp --http`: a gateway alone, a client of the service at
    CHRONICLE_NATS_URL (run as many as you like)."""
    assert settings.nats_url  # (service_url found it)
    stop = stop_on_signals()
    check_port_free(settings.http_host, settings.http_port if kind == "http" else settings.mcp_port,
                    "CHRONICLE_HTTP_PORT" if kind == "http" else "CHRONICLE_MCP_PORT")
    from adapters.metrics import GatewayMetrics, MetricsEndpoint

    metrics = GatewayMetrics()
    endpoint = MetricsEndpoint(metrics.registry, settings.metrics_host, settings.metrics_port).start() \
        if settings.metrics_port else None
    if kind == "http":
        server = await rest_server(settings, settings.nats_url, metrics)
    else:
        from entrypoints.gateways.http_server import HttpServer
        from entrypoints.gateways.mcp import streamable_http_app
        from entrypoints.gateways.request_metrics import RequestMetrics

        app = RequestMetrics(streamable_http_app(settings.nats_url, settings.subject_prefix, settings.http_host), metrics)
        server = await HttpServer(app, settings.http_host, settings.mcp_port, http_limits(settings)).start()
    heap.settle()
    log.info("ready", extra={kind: server.url, "nats": settings.nats_url,
                             "metrics": endpoint.url if endpoint is not None else None})
    await stop.wait()
    await server.stop()
    if endpoint is not None:
        await asyncio.to_thread(endpoint.stop)
    log.info("stopped")


def service_url(settings: Settings) -> Settings:
    """The settings of a client of the service (a gateway): CHRONICLE_NATS_URL, else the
    embedded NATS of the `chronicle serve` that ran on CHRONICLE_DATA_DIR (its port is kept
    across restarts)."""
    from entrypoints.servers import local_nats_url

    url = settings.nats_url or local_nats_url(settings.data_dir)
    if url is None:
        raise SetupError(
            f"no Chronicle service found: none ever ran on {settings.data_dir.resolve()}; start `chronicle serve` "
            "(or set CHRONICLE_DATA_DIR to the data dir of the one that runs), or set CHRONICLE_NATS_URL"
        )
    return settings.model_copy(update={"nats_url": url})


def nats_secrets(url: str) -> None:
    """What the NATS server (infra/nats/chronicle.conf) and Chronicle share, as the shell
    variables each needs: the first three for nats-server, the last three for Chronicle."""
    from adapters.embedded import BusSecrets

    secrets = BusSecrets.new()
    for name, value in {
        **secrets.server_environment(),
        "CHRONICLE_NATS_URL": secrets.service_url(url),
        "CHRONICLE_NATS_CALLOUT_URL": secrets.callout_url(url),
        "CHRONICLE_NATS_CALLOUT_SEED": secrets.issuer_seed,
    }.items():
        print(f"export {name}='{value}'")


def token(settings: Settings, user: str, ttl: int, roles: list[str], durables: list[str]) -> None:
    from entrypoints.bootstrap import build

    claims = {**({"roles": roles} if roles else {}), **({DURABLES_CLAIM: durables} if durables else {})}
    print(build(settings).authority.issue(user, ttl_seconds=ttl, claims=claims or None))


@contextlib.contextmanager
def database(settings: Settings, through: Stage | None = None) -> Iterator[Chronicle]:
    """The configured database, or the embedded one `serve` uses, migrated: a Chronicle built
    as `serve` builds it and started only as far as the command needs."""
    from entrypoints.bootstrap import Stage, build

    chronicle = build(settings)
    asyncio.run(chronicle.start(through=through or Stage.DATABASE))
    try:
        yield chronicle
    finally:
        asyncio.run(chronicle.stop())


def read_models(chronicle: Chronicle, read: Callable[[Queries], Awaitable[Report]]) -> Report:
    """What `read` makes of the read models, read straight from the database (an operator's report)."""
    from adapters.read_side.queries import opened_queries
    from adapters.read_side.sealing import Seals
    from services.runtime.cursors import CursorSeal

    async def run() -> Report:
        async with opened_queries(chronicle.target.url, CursorSeal.of_this_process(), Seals(chronicle.keys)) as queries:
            return await read(queries)

    return asyncio.run(run())


def semantic_search(chronicle: Chronicle) -> str:
    """How search ranks, in words: hybrid with which embedder, or full text and why."""
    if chronicle.read_models.semantic_off is not None:
        return f"full text only: {chronicle.read_models.semantic_off}"
    semantic = next(p for p in chronicle.projections if p.name == "semantic")
    embedder = semantic.options["embedder"]
    return f"hybrid: full text + semantic ({embedder.name}, {embedder.dimensions} dimensions, pgvector)"


def projections_status(settings: Settings) -> None:
    from adapters.read_side.parking import parked
    from adapters.read_side.tracking import status

    with database(settings) as chronicle:
        rows = status(chronicle.target, chronicle.projections)
        set_aside = parked(chronicle.target)
    print(f"{'projection':<12} {'position':>10} {'head':>10} {'lag':>8} {'version':>8}  updated")
    for r in rows:
        version = f"{r.version}" if r.version == r.code_version else f"{r.version}->{r.code_version}"
        print(f"{r.name:<12} {r.position:>10} {r.head:>10} {r.lag:>8} {version:>8}  {r.updated_at or '-'}")
    for p in set_aside:  # events a read model or relay could not take (chronicle.parked)
        print(f"parked: {p.consumer} {p.count} (latest at position {p.last_position}: {p.last_error})")
    print(f"search: {semantic_search(chronicle)}")


def chosen_projections(chronicle: Chronicle, names: list[str]) -> list[type[Projection[Any]]]:
    """The read models NAMES names ('all' for every one kept); exits on an unknown name, or
    on one this deployment does not keep (semantic without pgvector), saying why."""
    from entrypoints.read_models import OPTIONAL, PROJECTIONS

    known = [p.name for p in PROJECTIONS + OPTIONAL]
    unknown = set(names) - set(known) - {"all"}
    if unknown:
        sys.exit(f"unknown projection(s): {', '.join(sorted(unknown))}; known: {', '.join(known)}")
    kept = chronicle.read_models.classes
    if set(names) - {p.name for p in kept} - {"all"}:
        sys.exit(f"the semantic read model is not kept here: {chronicle.read_models.semantic_off}")
    return [p for p in kept if "all" in names or p.name in names]


def projections_rebuild(settings: Settings, names: list[str]) -> None:
    with database(settings) as chronicle:
        rebuild_read_models(settings, chronicle.target, chosen_projections(chronicle, names))


def rebuild_read_models(settings: Settings, target: PostgresTarget, chosen: list[type[Projection[Any]]]) -> None:
    """Rebuild these read models from the first event, one progress bar each."""
    from tqdm import tqdm

    from adapters.read_side.rebuild import rebuild_all
    from entrypoints.read_models import postgres_read_models
    from entrypoints.rebuild_helper import rebuild_helper

    bars = {
        p.name: tqdm(desc=f"rebuild {p.name}", unit="pos", total=0, position=i, file=sys.stderr)
        for i, p in enumerate(chosen)
    }

    def progress(name: str, done: int, total: int) -> None:
        bars[name].total = total
        bars[name].n = done
        bars[name].refresh()

    applied = rebuild_all(
        target,
        postgres_read_models(settings, chosen),
        batch_size=settings.projection_batch_size,
        progress=progress,
        helper=rebuild_helper(settings, target),
    )
    for bar in bars.values():
        bar.close()
    for name, count in applied.items():
        print(f"{name}: rebuilt from {count} events")


def projections_verify(settings: Settings, names: list[str]) -> None:
    """Rebuild each read model aside and compare it with the live one; exit 1 on any difference."""
    from tqdm import tqdm

    from adapters.read_side.verify import report, verify
    from entrypoints.read_models import postgres_read_model

    results = []
    with database(settings) as chronicle:
        for projection_class in chosen_projections(chronicle, names or ["all"]):
            with tqdm(desc=f"verify {projection_class.name}", unit="pos", total=0, file=sys.stderr) as bar:

                def progress(done: int, total: int, bar: tqdm = bar) -> None:
                    bar.total = total
                    bar.n = done
                    bar.refresh()

                results.append(
                    verify(
                        chronicle.target,
                        postgres_read_model(settings, projection_class),
                        batch_size=settings.projection_batch_size,
                        progress=progress,
                    )
                )
    for result in results:
        print("\n".join(report(result)))
    if not all(result.ok for result in results):
        sys.exit(1)


def run_projections(settings: Settings) -> None:
    """Run only the projection engine (a dedicated projection worker), until SIGINT/SIGTERM."""
    import threading

    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    with database(settings.model_copy(update={"run_projections": True, "projection_process": False})) as chronicle:
        engine = chronicle.engine
        assert engine is not None  # (run_projections, as set above)
        engine.start()
        metrics = metrics_endpoint(settings, chronicle)  # read models' positions, lag and parked events
        log.info(
            "projections running",
            extra={"postgres": chronicle.target.describe(), "metrics": metrics.url if metrics else None},
        )
        with contextlib.suppress(KeyboardInterrupt):
            stopped.wait()
        if metrics is not None:
            metrics.stop()
        engine.stop()


def audit_verify(settings: Settings, stream: str | None) -> None:
    """Recompute the hash chains; print every break and a summary; exit 1 on any break."""
    import uuid

    from tqdm import tqdm

    from adapters.store.hash_chains import verify_chains

    try:
        stream_id = uuid.UUID(stream) if stream else None
    except ValueError:
        sys.exit("audit verify: --stream takes an aggregate id (a UUID)")
    # The bar is for the whole store; one stream is quick.
    bar = tqdm(desc="audit verify", unit="event", file=sys.stderr, disable=stream_id is not None)

    def total(count: int) -> None:
        bar.total = count
        bar.refresh()

    with database(settings) as chronicle:
        report = verify_chains(chronicle.target, stream_id, on_total=total, on_progress=bar.update)
    bar.close()
    for broken in report.breaks:
        print(f"break: stream {broken.stream} version {broken.version}: {broken.reason}")
    print(f"audit verify: {report.streams} streams, {report.events} events checked, {len(report.breaks)} breaks")
    if not report.intact:
        sys.exit(1)


def audit_digest(settings: Settings, check: list[str] | None) -> None:
    """Print the digest of the store now, or recompute a published one (POSITION ROOT) and
    say whether it matches; exit 1 if it does not. Records nothing."""
    from adapters.store.digest import compute_digest, issued_position

    position, root = None, None
    if check is not None:
        try:
            position, root = int(check[0]), check[1].strip().lower()
        except ValueError:
            sys.exit("audit digest: --check takes a position (an integer) and a root (hex)")
    with database(settings) as chronicle:
        issued = issued_position(chronicle.target)
        if position is not None and not 1 <= position <= issued:
            # Events not yet written could still land at or below a position never issued.
            sys.exit(f"audit digest: position {position} was never reached by this store (it is at {issued})")
        digest = compute_digest(chronicle.target, position)
    print(f"position {digest.position}  streams {digest.streams}  events {digest.events}")
    print(f"root {digest.root_hex}")
    if root is not None:
        if digest.root_hex != root:
            print(f"MISMATCH: the published root at position {position} was {root}")
            sys.exit(1)
        print(f"match: the published root at position {position} holds")


def migrate_command(settings: Settings) -> None:
    with database(settings):
        pass
    print("migrations applied")


def replay(settings: Settings, ident: str, at_version: int | None, at_time: str | None) -> None:
    import uuid
    from datetime import UTC, datetime

    from chronicle_contract.errors import ChronicleError

    from adapters.store.audit_decoder import Decoder
    from services.audit.replay import replay as replay_report

    try:
        aggregate_id = uuid.UUID(ident)
        when = datetime.fromisoformat(at_time) if at_time else None
    except ValueError as error:
        sys.exit(f"replay: {error}")
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    with database(settings) as chronicle:
        try:
            print(read_models(chronicle, lambda queries: replay_report(queries, Decoder(chronicle.keys), aggregate_id, at_version, when)))
        except ChronicleError as error:
            sys.exit(error.message)


def erase_user_command(settings: Settings, user: str) -> None:
    """Erase a user now (no service needed): record the erasure, destroy the key."""
    from adapters.store.kek_rotation import PostgresKeyRotation
    from adapters.store.user_data import PostgresUserData
    from entrypoints.bootstrap import Stage
    from services.ports.keys import RotationUnavailable
    from services.users.erasure import erase_user

    with database(settings, through=Stage.BUS) as chronicle:
        reply = asyncio.run(erase_user(chronicle.bus, chronicle.keys, PostgresUserData(chronicle.target), user, "cli"))
        print(f"user {user}: {'erased' if reply['erased'] else 'was already erased'} (key destroyed)")
        # Rotated now rather than within the epoch: no service need be running for it.
        try:
            rotated = PostgresKeyRotation(chronicle.target, chronicle.keks).rotate()
        except RotationUnavailable:
            print("the key-encryption key is static: rotate it yourself (README, backups)", file=sys.stderr)
            return
    print("key-encryption key rotated" if rotated else "key-encryption key rotation: under way on another instance")


def export_command(settings: Settings, user: str | None, session: str | None, since: str | None, output: str | None) -> None:
    """Write the chosen events as JSON lines (an audit log) to OUTPUT or stdout, with progress."""
    import uuid
    from datetime import UTC, datetime

    from tqdm import tqdm

    from adapters.store.export import ExportScope, export_events

    try:
        session_id = uuid.UUID(session) if session else None
        since_time = datetime.fromisoformat(since) if since else None
    except ValueError as error:
        sys.exit(f"export: {error}")
    if since_time is not None and since_time.tzinfo is None:
        since_time = since_time.replace(tzinfo=UTC)
    bar = tqdm(desc="export", unit="event", file=sys.stderr)

    def total(count: int) -> None:
        bar.total = count
        bar.refresh()

    with database(settings) as chronicle, (open(output, "wb") if output else contextlib.nullcontext(sys.stdout.buffer)) as out:
        written = export_events(
            chronicle.target, chronicle.keys, ExportScope(user, session_id, since_time), out, on_total=total, on_progress=bar.update
        )
    bar.close()
    print(f"export: {written} events written to {output or 'stdout'}", file=sys.stderr)


def import_command(settings: Settings, path: str) -> None:
    """Load an exported audit log into an empty store, then rebuild every read model."""
    from tqdm import tqdm

    from adapters.store.import_log import NotALog, StoreNotEmpty, check_log, import_events

    try:
        with open(path, "rb") as lines:
            total = check_log(lines)
    except (OSError, NotALog) as error:
        sys.exit(f"import: {path}: {error}")
    with database(settings) as chronicle:
        with open(path, "rb") as lines, tqdm(desc="import", unit="event", total=total, file=sys.stderr) as bar:
            try:
                report = import_events(chronicle.target, chronicle.keys, lines, on_progress=bar.update)
            except StoreNotEmpty as error:
                sys.exit(f"import refused: {error}")
        print(
            f"import: {report.events} events appended ({report.erased_events} of"
            f" {len(report.erased_owners)} erased users kept erased); rebuilding read models"
        )
        rebuild_read_models(settings, chronicle.target, chronicle.read_models.classes)


def optimizations_show(settings: Settings, ident: str) -> None:
    import uuid

    from services.optimizations.report import load, render

    try:
        optimization_id = uuid.UUID(ident)
    except ValueError:
        sys.exit(f"optimizations show: {ident!r} is not an optimization id (a UUID)")
    with database(settings) as chronicle:
        found = read_models(chronicle, lambda queries: load(queries, optimization_id))
    if found is None:
        sys.exit(f"optimization {optimization_id} not found")
    print(render(*found))


def artifacts_command(settings: Settings, action: str, ident: str, depth: int) -> None:
    """`artifacts show` or `artifacts tree`: read the read models directly, whoever owns the artifact."""
    import uuid

    from services.artifacts import report

    try:
        artifact_id = uuid.UUID(ident)
    except ValueError:
        sys.exit(f"artifacts {action}: {ident!r} is not an artifact id (a UUID)")
    with database(settings) as chronicle:
        if action == "show":
            row = read_models(chronicle, lambda queries: report.load_artifact(queries, artifact_id))
            text = None if row is None else report.render_artifact(row)
        else:
            lineage = read_models(chronicle, lambda queries: report.load_tree(queries, artifact_id, depth))
            text = None if lineage is None else report.render_tree(*lineage)
    if text is None:
        sys.exit(f"artifact {artifact_id} not found")
    print(text)


def lineage_depth(text: str) -> int:
    depth = int(text) if text.isdigit() else 0
    if not 1 <= depth <= 1_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a depth from 1 to 1000")
    return depth


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="chronicle",
        description="Chronicle: event-sourced memory for AI systems. Configured by CHRONICLE_* variables "
        "(CHRONICLE_DATABASE_URL, CHRONICLE_NATS_URL, ...); without URLs it starts embedded servers "
        "under ./.chronicle/ (CHRONICLE_DATA_DIR), which the other commands share while `chronicle serve` runs.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("serve", help="run the service in the foreground until SIGINT/SIGTERM")
    sub.add_parser("http", help="run the REST API alone, a client of the service at CHRONICLE_NATS_URL (unset: the "
                   "one `chronicle serve` runs on CHRONICLE_DATA_DIR)")
    mc = sub.add_parser("mcp", help="run the MCP server: over stdio (CHRONICLE_TOKEN), or --http; a client of the "
                        "service at CHRONICLE_NATS_URL (unset: the one `chronicle serve` runs on CHRONICLE_DATA_DIR)")
    mc.add_argument("--http", action="store_true", help="streamable HTTP on CHRONICLE_MCP_PORT (tokens per request)")
    t = sub.add_parser("token", help="print a bearer token for USER (local HS256 secret)")
    t.add_argument("user")
    t.add_argument("--ttl", type=int, default=30 * 24 * 3600, help="lifetime in seconds (default 30 days)")
    t.add_argument("--role", action="append", default=[], dest="roles", choices=ROLES, metavar="ROLE",
                   help=f"a role claim: {', '.join(ROLES)} (repeatable)")
    t.add_argument(
        "--durable", action="append", default=[], dest="durables",
        help="an event feed durable the token's holder may keep (with --role feed; repeatable, at most 8)",
    )
    rp = sub.add_parser("replay", help="an aggregate's events, and its state at a version or time")
    rp.add_argument("aggregate_id", metavar="AGGREGATE_ID")
    point = rp.add_mutually_exclusive_group()
    point.add_argument("--at-version", type=int, metavar="N", help="print the state after version N")
    point.add_argument("--at-time", metavar="T", help="print the state as of T (ISO 8601, e.g. 2026-11-22T10:00:00Z)")
    sub.add_parser("migrate", help="apply pending database migrations")
    ns = sub.add_parser(
        "nats-secrets",
        help="print fresh secrets for a NATS server run with infra/nats/chronicle.conf, as environment variables",
    )
    ns.add_argument("--url", default="nats://127.0.0.1:4222", help="the NATS server Chronicle connects to")
    sr = sub.add_parser(
        "nats-static-roles",
        help="print a NATS server configuration (infra/nats/static-roles.conf) whose static users are Chronicle's "
             "own connections, each granted only its role's subjects for a subject prefix",
    )
    sr.add_argument("--prefix", help="the subject prefix (default: CHRONICLE_SUBJECT_PREFIX, or chronicle)")
    proj = sub.add_parser("projections", help="inspect or rebuild read models")
    psub = proj.add_subparsers(dest="projections_command", required=True, metavar="ACTION")
    psub.add_parser("status", help="each projection's position and lag")
    r = psub.add_parser("rebuild", help="rebuild read models from the first event (NAME or 'all')")
    r.add_argument("names", nargs="+", metavar="NAME")
    pv = psub.add_parser("verify", help="rebuild read models aside and compare with the live ones (all by default)")
    pv.add_argument("names", nargs="*", metavar="NAME")
    psub.add_parser("run", help="run the projection engine alone (no NATS)")
    audit = sub.add_parser("audit", help="check that the stored history was not altered")
    asub = audit.add_subparsers(dest="audit_command", required=True, metavar="ACTION")
    v = asub.add_parser("verify", help="recompute the events' hash chains; exit 1 on any break")
    scope = v.add_mutually_exclusive_group()
    scope.add_argument("--stream", metavar="ID", help="one aggregate's stream (its id)")
    scope.add_argument("--all", action="store_true", help="every stream, with progress (the default)")
    dg = asub.add_parser("digest", help="the Merkle root over every stream's head now, or --check a published one")
    dg.add_argument(
        "--check", nargs=2, metavar=("POSITION", "ROOT"), help="recompute the root at POSITION; exit 1 unless it is ROOT"
    )
    eu = sub.add_parser("erase-user", help="erase a user: destroy their data key (crypto-shredding), then rotate the key-encryption key")
    eu.add_argument("user")
    ex = sub.add_parser("export", help="write an audit log as JSON lines (one event a line, with its hash)")
    what = ex.add_mutually_exclusive_group(required=True)
    what.add_argument("--user", metavar="U", help="every aggregate owned by user U")
    what.add_argument("--session", metavar="S", help="everything in session (or conversation) S")
    what.add_argument("--all", action="store_true", help="every event")
    ex.add_argument("--since", metavar="T", help="only events at or after T (ISO 8601)")
    ex.add_argument("--output", "-o", metavar="FILE", help="write to FILE instead of stdout")
    im = sub.add_parser("import", help="load an exported audit log into an empty store, then rebuild read models")
    im.add_argument("file", metavar="FILE")
    opt = sub.add_parser("optimizations", help="inspect optimization histories")
    osub = opt.add_subparsers(dest="optimizations_command", required=True, metavar="ACTION")
    show = osub.add_parser("show", help="an optimization's rounds as a table and its best-so-far curve")
    show.add_argument("optimization_id", metavar="ID")
    art = sub.add_parser(
        "artifacts",
        help="inspect an artifact or its lineage (an operator tool: reads the read models directly, any user's artifacts)",
        description="Operator tool: reads the read models directly, so it is not scoped to a user and shows any "
        "user's artifacts.",
    )
    artsub = art.add_subparsers(dest="artifacts_command", required=True, metavar="ACTION")
    ashow = artsub.add_parser("show", help="an artifact's provenance, stats, shape, RAG examples, previews and draft")
    ashow.add_argument("artifact_id", metavar="ID")
    atree = artsub.add_parser("tree", help="the path from the root ancestor to the artifact, then its descendants")
    atree.add_argument("artifact_id", metavar="ID")
    atree.add_argument(
        "--depth", type=lineage_depth, default=50, metavar="N", help="generations walked each way (default 50, max 1000)"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        run(args)
    except SetupError as error:  # a bad setting or a server out of reach: one line, no traceback
        sys.exit(f"chronicle {args.command}: {error}")
    except KeyboardInterrupt:  # (a command that installs no handler of its own)
        sys.exit(130)


def run(args: argparse.Namespace) -> None:
    settings = load_settings()
    logs.configure(settings.log_level)
    if args.command == "serve":
        uvloop.run(serve(settings))
    elif args.command == "http" or (args.command == "mcp" and args.http):
        uvloop.run(serve_gateway(service_url(settings), "http" if args.command == "http" else "mcp"))
    elif args.command == "mcp":
        from entrypoints.gateways.mcp import run_stdio

        run_stdio(service_url(settings))
    elif args.command == "token":
        token(settings, args.user, args.ttl, args.roles, args.durables)
    elif args.command == "replay":
        replay(settings, args.aggregate_id, args.at_version, args.at_time)
    elif args.command == "migrate":
        migrate_command(settings)
    elif args.command == "nats-secrets":
        nats_secrets(args.url)
    elif args.command == "nats-static-roles":
        from adapters.messaging.identities import static_roles_config

        print(static_roles_config(args.prefix or settings.subject_prefix), end="")
    elif args.command == "audit" and args.audit_command == "digest":
        audit_digest(settings, args.check)
    elif args.command == "audit":
        audit_verify(settings, args.stream)
    elif args.command == "erase-user":
        erase_user_command(settings, args.user)
    elif args.command == "export":
        export_command(settings, args.user, args.session, args.since, args.output)
    elif args.command == "import":
        import_command(settings, args.file)
    elif args.command == "optimizations":
        optimizations_show(settings, args.optimization_id)
    elif args.command == "artifacts":
        artifacts_command(settings, args.artifacts_command, args.artifact_id, getattr(args, "depth", 50))
    elif args.projections_command == "status":
        projections_status(settings)
    elif args.projections_command == "rebuild":
        projections_rebuild(settings, args.names)
    elif args.projections_command == "verify":
        projections_verify(settings, args.names)
    elif args.projections_command == "run":
        run_projections(settings)


if __name__ == "__main__":
    main()
