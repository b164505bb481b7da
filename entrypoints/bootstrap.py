"""The composition root: builds every piece from settings, then starts them in order.

`build(settings, overrides)` builds the whole object graph and connects to nothing: the
event store, key ring, command bus, projection engine, query pools, positions, each
capability's pieces (entrypoints/wiring.py), the NATS connections and the service object.
What only exists once a server is up (an embedded server's URL, the shared cursor key,
whether the server holds vectors) is asked for on start: pieces are given the database
`PostgresTarget`, which resolves its URL when they connect, and NATS client objects that
`start()` connects. `await chronicle.start()` then starts the stages in order, each piece's
stop pushed on one exit stack, and `stop()` closes them in reverse. Operator commands
start only the stages they need (`through=Stage.DATABASE`). Tests pass fakes in through
`Overrides`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from multiprocessing.connection import Connection
from typing import Any
from uuid import UUID

from chronicle_contract.bus import usage_subject, user_permissions
from chronicle_contract.hitl import hitl_stream, hitl_taken_bucket
from nats.aio.client import Client as NATS

from adapters.auth import TokenAuthority
from adapters.errors import DriverFailures, statement_failed
from adapters.generation.agent_offline import OfflineAgent
from adapters.generation.agent_openai import OpenAIAgent
from adapters.generation.generator_offline import OfflineGenerator
from adapters.generation.generator_openai import OpenAICompatibleGenerator
from adapters.messaging.callout import SYSTEM_USER, AuthCallout, CalloutThread
from adapters.messaging.connect import connect_options, drain, nats_error
from adapters.messaging.fair_share import FairShare, Limits
from adapters.messaging.flood_brake import Brake, FloodBrake
from adapters.messaging.identities import Role, ServiceIdentities, connect_role, service_password
from adapters.messaging.jetstream import JetStreams, remove_stream
from adapters.messaging.nats_service import NatsService
from adapters.messaging.usage_sync import UsageSync
from adapters.metrics import Metrics
from adapters.randomness import uuid4
from adapters.read_side.positions import ProjectionPositions
from adapters.read_side.queries import PostgresQueries, query_pool
from adapters.read_side.relay import relay_channels
from adapters.read_side.replayed_positions import ReplayedPositions
from adapters.read_side.sealing import Seals
from adapters.read_side.tracking import tracked_version
from adapters.scraped import Scraped, Source, Tracking
from adapters.store.event_store import EventStore
from adapters.store.kek import AttachedKeks
from adapters.store.keys import KeyRing, service_key
from adapters.store.postgres import PostgresTarget, migrate
from adapters.store.reachability import Reachability, fail_fast
from adapters.store.snapshots import SealedSnapshots
from entrypoints import heap, logs
from entrypoints.feed_process import FeedProcess
from entrypoints.kek import attached_keks
from entrypoints.projection_process import PREPARED, ProjectionProcess, die_with_parent
from entrypoints.read_models import InProcessEngine, ReadModels, embedder
from entrypoints.routes import command_handlers, routes
from entrypoints.servers import Callout, Servers
from entrypoints.settings import Settings
from entrypoints.wiring import (
    Closing,
    Core,
    ServiceConnections,
    Startable,
    Wiring,
    wire_artifacts,
    wire_audit,
    wire_hitl,
    wire_jobs,
    wire_read_models,
    wire_users,
)
from projections.semantic import SemanticProjection
from projections.view import Projection
from services.artifacts.retention import RetentionSweeper
from services.audit.digests import DigestPublisher
from services.hitl.coordinator import SignalRelay
from services.jobs.worker import JobRelay, JobWorkers
from services.ports.agent import Agent
from services.ports.event_store import Store
from services.ports.generator import Generator
from services.ports.read_models import SemanticSearch
from services.runtime.command_bus import CommandBus
from services.runtime.cursors import CursorSeal
from services.runtime.snapshots import SnapshotTaker

log = logging.getLogger(__name__)


def generator_for(settings: Settings) -> Generator:
    if settings.generator == "openai":
        if settings.openai_api_key is None:
            raise RuntimeError("CHRONICLE_GENERATOR=openai needs CHRONICLE_OPENAI_API_KEY")
        return OpenAICompatibleGenerator(
            settings.openai_url, settings.openai_model, settings.openai_api_key.get_secret_value()
        )
    return OfflineGenerator()


def agent_for(settings: Settings) -> Agent:
    if settings.agent == "openai":
        if settings.openai_api_key is None:
            raise RuntimeError("CHRONICLE_AGENT=openai needs CHRONICLE_OPENAI_API_KEY")
        return OpenAIAgent(settings.openai_url, settings.openai_model, settings.openai_api_key.get_secret_value())
    return OfflineAgent()


def authority_for(settings: Settings) -> TokenAuthority:
    if settings.jwt_secret or settings.jwt_public_key:
        return TokenAuthority(secret=settings.jwt_secret, public_key=settings.jwt_public_key)
    return TokenAuthority.local(settings.data_dir)  # (the one file build() may read: the embedded default's secret)


class Stage(IntEnum):
    """What `Chronicle.start` brings up, in order; each stage needs the ones before it."""

    DATABASE = 1  # servers, migrations, which read models the server keeps
    BUS = 2  # the command bus (and its snapshots)
    READ = 3  # the projection engine, the query pools, read-your-writes positions
    SERVICE = 4  # NATS: streams, each capability's relays, workers and sweepers, the endpoints


SEARCH_EMBED_TIMEOUT = 2.0  # seconds a search waits for an embeddings endpoint
BACKGROUND_POOL_SIZE = 2  # connections to the primary for the service's own reads, when a replica serves queries


@dataclass(frozen=True)
class Overrides:
    """What a test or a script may put in place of what settings would build."""

    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    new_id: Callable[[], UUID] = uuid4
    authority: TokenAuthority | None = None
    generator: Generator | None = None
    agent: Agent | None = None
    # An event store in place of Postgres (adapters/store/memory.py, or a test's fake of the
    # port): the bus runs on it with no server; the read side and the service need
    # Postgres, so start through BUS.
    store: Store | None = None


@dataclass
class Chronicle:
    """One Chronicle instance: built whole from settings, started stage by stage, stopped in reverse."""

    settings: Settings
    overrides: Overrides
    authority: TokenAuthority
    metrics: Metrics  # this process's instruments; `chronicle serve` serves them on settings.metrics_port
    scraped: Scraped  # in metrics' registry: what a scrape reads from Postgres and NATS, once they are started
    servers: Servers  # the URLs in use, embedded servers started for those not set
    read_models: ReadModels  # which ones this deployment keeps (the server is asked as the database starts)
    core: Core  # the shared pieces each capability's wiring uses
    store: Store  # what the bus saves to: core.postgres_store, or the one overrides give
    engine: ProjectionProcess | InProcessEngine | None
    semantic: SemanticSearch | None  # what a hybrid search needs, if the server keeps the semantic read model
    cursors: CursorSeal  # given the shared key on start
    capabilities: list[Wiring]
    usage: UsageSync | None  # shares per-user rates with the other instances
    service: NatsService
    retention: RetentionSweeper | None
    job_workers: JobWorkers | None  # this instance's, if it runs any
    digest_publisher: DigestPublisher | None
    rebuilding: list[str] = field(default_factory=list)  # read models still rebuilt when it started
    feed: FeedProcess | None = None  # the event feed's child process, once started (settings.feed_process)
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    # The shared pieces by their own names (what operator commands and tests reach for).
    @property
    def target(self) -> PostgresTarget:
        return self.core.target

    @property
    def keys(self) -> KeyRing:
        return self.core.keys

    @property
    def keks(self) -> AttachedKeks:
        """What wraps the keys, outside Postgres (attached on start)."""
        return self.core.keks

    @property
    def postgres_store(self) -> EventStore:
        return self.core.postgres_store

    @property
    def bus(self) -> CommandBus:
        return self.core.bus

    @property
    def queries(self) -> PostgresQueries:
        return self.core.queries

    @property
    def positions(self) -> ProjectionPositions:
        return self.core.positions

    @property
    def read_queries(self) -> PostgresQueries:
        return self.core.read_queries

    @property
    def read_positions(self) -> ProjectionPositions:
        return self.core.read_positions

    @property
    def tracking(self) -> Tracking:
        return self.core.tracking

    @property
    def projections(self) -> list[Projection[Any]]:
        return self.read_models.projections

    @property
    def nats_url(self) -> str:
        """What users connect to (once started)."""
        return self.servers.nats_url

    @property
    def subjects(self) -> list[str]:
        return [r.subject for r in self.service.routes]

    async def start(self, through: Stage = Stage.SERVICE) -> Chronicle:
        if self.overrides.store is not None and through > Stage.BUS:
            raise ValueError("an event store in place of Postgres runs the bus only: start(through=Stage.BUS)")
        try:
            if self.overrides.store is None:
                await self._start_database(nats=through >= Stage.SERVICE)
            if through >= Stage.BUS:
                self._start_bus()
            if through >= Stage.READ:
                await self._start_reading()
            if through >= Stage.SERVICE:
                self.rebuilding = await self._read_models_built()
                await self._start_service()
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        await self._stack.aclose()

    async def _start_database(self, *, nats: bool) -> None:
        """The servers (embedded ones for the URLs not set), the schema, and which read models
        the server keeps; the key ring and the event store connect as they are first used."""
        self._stack.callback(self.servers.stop)  # (first: what a start cut short had started is stopped too)
        starting = asyncio.ensure_future(asyncio.to_thread(self.servers.start, nats=nats))
        try:
            await asyncio.shield(starting)
        except asyncio.CancelledError:  # (a signal during start): the thread finishes, then all is stopped
            with contextlib.suppress(Exception):
                await starting
            raise
        await asyncio.to_thread(migrate, self.target)
        # Data keys are kept wrapped by keys held outside Postgres (a store of an earlier
        # version has its clear keys wrapped here, at its first start).
        self.keks.attach(await asyncio.to_thread(attached_keks, self.settings, self.target))
        await asyncio.to_thread(self.read_models.choose, self.target)
        self.tracking.read_models = self.read_models.names
        self._scrape("postgres", self.tracking)
        self._stack.callback(self.keys.close)
        self._stack.callback(self.postgres_store.close)

    def _start_bus(self) -> None:
        self.bus.start()
        self._stack.callback(self.bus.stop)

    async def _start_reading(self) -> None:
        if self.engine is not None:
            self.engine.start()
            self._stack.callback(self.engine.stop)
        if self.semantic is not None:
            self._stack.callback(getattr(self.semantic.embedder, "close", lambda: None))
            if SemanticProjection not in self.read_models.classes:  # (the server holds no vectors)
                self.queries.semantic = self.read_queries.semantic = None
        # Every instance seals cursors under the one key kept in the primary (not a key of its
        # own: a client's next page may reach another instance; not one derived from the JWT
        # secret: a deployment verifying RS256 tokens holds only a public key).
        self.cursors.use(await asyncio.to_thread(service_key, self.target, "cursors", self.keks))
        for queries in dict.fromkeys([self.queries, self.read_queries]):
            await queries.pool.open()
            self._stack.push_async_callback(queries.pool.close)
        for positions in dict.fromkeys([self.positions, self.read_positions]):
            await self._run(positions)
        if self.settings.read_database_url is not None:
            replica = PostgresTarget(self.settings.read_database_url)
            log.info("queries are served by a replica", extra={"replica": replica.describe()})

    async def _read_models_built(self) -> list[str]:
        """Wait (up to settings.ready_timeout) until this instance's engine has built its read
        models, so that the first request after start finds them (a fresh database's take a
        moment); those still being rebuilt after that, by name (an upgrade's rebuild: their
        previous version answers meanwhile, behind the log)."""
        if self.engine is None:
            return []
        if await asyncio.to_thread(self.engine.wait_prepared, self.settings.ready_timeout):
            return []

        def outdated() -> list[str]:
            with self.target.connect(autocommit=True) as conn:
                return [p.name for p in self.projections if tracked_version(conn, p.name) != p.version]

        return await asyncio.to_thread(outdated)

    async def _start_service(self) -> None:
        """NATS: the service's connection, the callouts, each capability's streams and running
        pieces, the shared rates, and last the endpoints."""
        if self.servers.callout is not None:  # (first: it admits the service's own connections too)
            await self._answer_callouts(self.servers.callout)
        # One connection per job, each allowed only its own subjects (adapters/messaging/identities.py).
        feed_here = self.settings.event_feed and not self.settings.feed_process
        for role, nc in self.core.nats.by_role().items():
            if role is not Role.FEED or feed_here:  # (a feed in its child process connects there)
                await self._connect_role(nc, role)
        await self._remove_earlier_streams()
        for wiring in self.capabilities:
            for ensure in wiring.streams:
                await ensure(self.core.streams)
        for wiring in self.capabilities:
            for piece in wiring.running:
                await self._run(piece)
        if self.settings.event_feed and self.settings.feed_process:  # (its stream made above)
            self.feed = FeedProcess(
                self.settings, self.target, self.servers.service_nats_url, scoped=self.servers.callout is not None,
            )
            await self._run(self.feed)
        if self.usage is not None:
            # Started before the endpoints and stopped after them: its last report holds
            # what they served while draining.
            await self._run(self.usage)
        # On a bus where each user receives only on their own inbox (the server makes auth
        # callouts), a request must ask for its reply there.
        self.service.scoped_inboxes = self.servers.callout is not None
        await self._run(self.service)

    async def _remove_earlier_streams(self) -> None:
        # Signals once kept their content in a stream, and orchestrators noted the answers
        # they took in a bucket; both are gone (services/hitl/coordinator.py).
        prefix = self.settings.subject_prefix
        for stream in (hitl_stream(prefix), f"KV_{hitl_taken_bucket(prefix)}"):
            if await remove_stream(self.core.js, stream):
                log.info("removed a stream of an earlier version", extra={"stream": stream})

    async def _answer_callouts(self, callout: Callout) -> None:
        """Users' connections are authorized here: their bearer token, checked as on every
        request, and their permissions (clients/python/chronicle_contract/bus.py). (Made on
        start: its issuer key is the server's, known once the servers are.)"""
        settings = self.settings

        def connecting(user: str | None, name: str) -> Callable[[], Awaitable[NATS]]:
            """A connection with the callout's password: as the callout's user, or as `user`
            (the system account's, KICK only: optional, a server configured before it
            existed has none, infra/nats/chronicle.conf)."""
            async def connect() -> NATS:
                options = connect_options(callout.url)
                if user is not None:
                    if "password" not in options:
                        raise ValueError("the callout's URL names no password")
                    options["user"] = user
                behaviour: dict[str, Any] = {"max_reconnect_attempts": -1, "reconnect_time_wait": 0.5, "error_cb": nats_error}
                nc = NATS()
                await nc.connect(**options, name=f"{settings.service_name}-{name}", **behaviour)
                return nc
            return connect

        brake = self.service.flood_brake
        # On a thread of its own: a flood of bad connects does not queue behind requests, nor they behind it.
        thread = CalloutThread(connecting(None, "auth"), lambda nc, system: AuthCallout(
            nc, callout.issuer_seed, verify=self.authority.verify, account=settings.nats_account,
            permissions=functools.partial(user_permissions, settings.subject_prefix),
            services=ServiceIdentities(settings.subject_prefix, service_password(self.servers.service_nats_url)).admit,
            brake=brake, system=system,
        ), connect_system=connecting(SYSTEM_USER, "system") if brake is not None else None)
        await self._run(thread)
        if brake is not None:
            brake.on_bench = thread.kick

    async def _connect_role(self, nc: NATS, role: Role) -> None:
        """Connect one of the service's connections as its role: on a bus with the callout, that
        role's identity, allowed only its subjects; drained on stop."""
        behaviour: dict[str, Any] = {"max_reconnect_attempts": -1, "reconnect_time_wait": 0.5, "error_cb": nats_error}
        await connect_role(self.servers.service_nats_url, role, scoped=self.servers.callout is not None, client=nc,
                           name=f"{self.settings.service_name}-{role.value}", **behaviour)
        self._stack.push_async_callback(drain, nc)

    def _scrape(self, name: str, source: Source) -> None:
        """Have scrapes read `source` until this instance stops."""
        self.scraped.sources[name] = source
        self._stack.callback(self.scraped.sources.pop, name, None)

    async def _run(self, component: Startable) -> None:
        await component.start()
        self._stack.push_async_callback(component.stop)


def build(settings: Settings, overrides: Overrides | None = None) -> Chronicle:
    """The whole object graph as settings and overrides choose it; nothing connected or started."""
    overrides = overrides or Overrides()
    metrics, scraped = Metrics(), Scraped()
    metrics.registry.register(scraped)
    authority = overrides.authority or authority_for(settings)
    servers = Servers(settings)
    target = PostgresTarget(functools.partial(started_database_url, servers))
    read_models = ReadModels(settings)
    keks = AttachedKeks()  # (attached on start: entrypoints/kek.py)
    keys = KeyRing(target, keks)
    postgres_store = EventStore(
        target, relay_channels=relay_channels([SignalRelay, JobRelay]), keys=keys,
        unavailable_after=settings.database_unavailable_after,
    )
    store = overrides.store or postgres_store
    bus = command_bus(settings, overrides, store, None if overrides.store else postgres_store, metrics)
    engine = projection_engine(settings, target, read_models, keys)
    # A search waits for its words' vector briefly, then ranks by full text alone.
    semantic = (
        None if settings.embedder == "none"
        else SemanticSearch(embedder(settings, timeout=SEARCH_EMBED_TIMEOUT), settings.semantic_min_similarity)
    )
    cursors = CursorSeal()
    # With a replica, the primary's pool serves only the service's own reads (sweepers, digests).
    size = settings.query_pool_size if settings.read_database_url is None else BACKGROUND_POOL_SIZE
    reachability = postgres_store.reachability  # (one view of whether the primary answers)
    sealing = Seals(keys)  # (the read models' content, opened with the keys events are)
    queries = postgres_queries(settings, lambda: target.url, reachability, semantic, size, cursors, sealing)
    positions = ProjectionPositions(target, read_models.candidates, reachability=reachability, log=target)
    read_queries, read_positions = queries, positions
    if settings.read_database_url is not None:
        # Queries go to the replica and wait for its replay; a replica that is away makes
        # them `unavailable` within database_unavailable_after, and commands carry on.
        replica = PostgresTarget(settings.read_database_url)
        replica_reachability = Reachability(
            replica.url, settings.database_unavailable_after, is_statement_failure=statement_failed
        )
        read_queries = postgres_queries(
            settings, replica.url, replica_reachability, semantic, settings.query_pool_size, cursors, sealing
        )
        read_positions = ReplayedPositions(replica, read_models.candidates, reachability=replica_reachability,
                                           log=target)
    connections = ServiceConnections()
    js = connections.streams.jetstream()
    core = Core(
        settings=settings, target=target, keks=keks, keys=keys, postgres_store=postgres_store, bus=bus,
        queries=queries, positions=positions, read_queries=read_queries, read_positions=read_positions,
        nats=connections, js=js, streams=JetStreams(js, settings.stream_replicas), tracking=Tracking(target, read_models.names), scraped=scraped,
    )
    generator = overrides.generator or generator_for(settings)
    agent = (overrides.agent or agent_for(settings)) if settings.job_workers > 0 else None
    made = [c for c, given in ((generator, overrides.generator), (agent, overrides.agent)) if given is None and c]
    artifacts = wire_artifacts(core, generator)
    jobs = wire_jobs(core, agent)
    audit = wire_audit(core)
    capabilities = [
        Wiring(running=[Closing(client) for client in made]),  # (stopped last: after what uses them)
        wire_read_models(core),
        wire_hitl(core),
        artifacts,
        jobs,
        audit,
        wire_users(core, forget=[artifacts.previews.forget_uploads] if artifacts.previews else []),
    ]
    fair_share, usage = shared_limits(settings, connections.usage, metrics)
    served = {kind: instance for wiring in capabilities for kind, instance in wiring.served.items()}
    service = NatsService(
        connections.responder,
        routes(settings.subject_prefix, bus, read_positions, settings.query_wait_timeout, served),
        authority,
        name=settings.service_name,
        max_in_flight=settings.max_in_flight,
        check_replies=settings.check_replies,
        max_json_bytes=settings.max_json_bytes,
        fair_share=fair_share,
        flood_brake=FloodBrake(Brake(settings.flood_refusals, settings.flood_window, settings.flood_cooldown)),
        metrics=metrics,
    )
    return Chronicle(
        settings=settings, overrides=overrides, authority=authority, metrics=metrics, scraped=scraped,
        servers=servers, read_models=read_models, core=core, store=store, engine=engine, semantic=semantic,
        cursors=cursors, capabilities=capabilities, usage=usage, service=service,
        retention=artifacts.retention, digest_publisher=audit.digest_publisher, job_workers=jobs.workers,
    )


def started_database_url(servers: Servers) -> str:
    if not servers.database_url:
        raise RuntimeError("the database is asked for before Chronicle.start() has started its servers")
    return servers.database_url


def command_bus(
    settings: Settings, overrides: Overrides, store: Store, postgres_store: EventStore | None, metrics: Metrics
) -> CommandBus:
    """The bus on `store`; snapshots are taken where the store is the Postgres one."""
    snapshots = None
    if postgres_store is not None:
        snapshots = SnapshotTaker(
            SealedSnapshots(postgres_store.snapshot_codec, postgres_store.snapshots),
            settings.snapshot_every,
            settings.snapshot_keep,
        )
    return CommandBus(
        store,
        command_handlers(),
        failures=DriverFailures(),
        max_batch=settings.group_commit_max_batch,
        cache_size=settings.aggregate_cache_size,
        cache_bytes=settings.aggregate_cache_bytes,
        clock=overrides.clock,
        new_id=overrides.new_id,
        snapshots=snapshots,
        metrics=metrics,
    )


def projection_engine(
    settings: Settings, target: PostgresTarget, read_models: ReadModels, keys: KeyRing
) -> ProjectionProcess | InProcessEngine | None:
    """What keeps this instance's read models: a child process, this process, or (with
    run_projections off) another deployment's process."""
    if not settings.run_projections:
        return None
    if settings.projection_process:
        return ProjectionProcess(settings, target, run_engine)
    return InProcessEngine(read_models, target, keys)


def postgres_queries(
    settings: Settings, url: str | Callable[[], str], reachability: Reachability, semantic: SemanticSearch | None,
    size: int, cursors: CursorSeal, sealing: Seals,
) -> PostgresQueries:
    pool = query_pool(url, min_size=min(2, size), max_size=size, application_name=f"{settings.service_name}-queries")
    fail_fast(pool, settings.database_unavailable_after)  # a read waits no longer for Postgres
    return PostgresQueries(
        pool, language=settings.search_language, reachability=reachability, semantic=semantic, cursors=cursors,
        sealing=sealing,
    )


def shared_limits(settings: Settings, nc: NATS, metrics: Metrics) -> tuple[FairShare | None, UsageSync | None]:
    """Each user's share of the service (None when every limit is off, as for a bulk
    pipeline: nothing to count per request), and what shares it with the other instances
    when rates are limited and settings ask for it."""
    limits = Limits(
        per_minute={
            "requests": settings.limit_requests_per_minute, "search": settings.limit_search_per_minute,
            "export": settings.limit_export_per_minute, "heavy": settings.limit_heavy_per_minute,
        },
        in_flight=settings.limit_in_flight_per_user,
        heavy_in_flight=settings.limit_heavy_in_flight_per_user,
        bulk_factor=settings.limit_bulk_factor,
    )
    if not (limits.rates_limited or limits.in_flight > 0 or limits.heavy_in_flight > 0):
        return None, None
    shared = limits.rates_limited and settings.limit_sync_interval > 0
    fair_share = FairShare(limits, report_every=settings.limit_sync_interval if shared else 0.0, metrics=metrics)
    usage = (
        UsageSync(nc, usage_subject(settings.subject_prefix), fair_share, every=settings.limit_sync_interval)
        if shared else None
    )
    return fair_share, usage


async def bootstrap(settings: Settings, **overrides: Any) -> Chronicle:
    """Build and start a whole Chronicle (what `chronicle serve` runs)."""
    return await build(settings, Overrides(**overrides)).start()


def run_engine(settings: Settings, url: str, parent_end: Connection, parent_pid: int) -> None:
    """A projection process's child (entrypoints/projection_process.py): run the engine until
    SIGTERM, or until the parent is gone. Built as the service is, on the parent's database,
    with the engine in this process."""
    die_with_parent(parent_pid)
    logs.configure(settings.log_level)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's to handle
    if settings.projection_nice:
        os.nice(settings.projection_nice)
    in_this_process = {"database_url": url, "run_projections": True, "projection_process": False}
    chronicle = build(settings.model_copy(update=in_this_process))
    asyncio.run(chronicle.start(through=Stage.DATABASE))
    engine = chronicle.engine
    assert engine is not None  # (run_projections, as set above)
    engine.start()
    parent = multiprocessing.parent_process()
    prepared = False
    try:
        while not stopping.is_set() and (parent is None or parent.is_alive()):
            if not prepared and engine.wait_prepared(0):
                heap.settle()
                parent_end.send(PREPARED)
                prepared = True
            stopping.wait(0.2)
    finally:
        engine.stop()
        asyncio.run(chronicle.stop())
