"""The composition root: builds every piece from settings, then starts them in order.

`build(settings, overrides)` connects to nothing: it resolves what settings choose (the
token authority, generator, agent, read models). `await chronicle.start()` then starts
the stages in order, each piece's stop pushed on one exit stack, and `stop()` closes them
in reverse. Operator commands start only the stages they need (`through=Stage.DATABASE`).
Tests pass fakes in through `Overrides`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import IntEnum
from typing import Any, Protocol, TypeVar
from uuid import UUID

import nats
from chronicle_contract.audit import RecordRead
from chronicle_contract.bus import usage_subject, user_permissions
from chronicle_contract.hitl import hitl_stream, hitl_taken_bucket
from nats.aio.client import Client as NATS

from adapters.auth import TokenAuthority
from adapters.errors import DriverFailures, statement_failed
from adapters.generation.agent_offline import OfflineAgent
from adapters.generation.agent_openai import OpenAIAgent
from adapters.generation.generator_offline import OfflineGenerator
from adapters.generation.generator_openai import OpenAICompatibleGenerator
from adapters.messaging.callout import AuthCallout, CalloutThread
from adapters.messaging.connect import connect_options
from adapters.messaging.fair_share import FairShare, Limits
from adapters.messaging.jetstream import JetStreams, remove_stream
from adapters.messaging.nats_service import NatsService
from adapters.messaging.usage_sync import UsageSync
from adapters.metrics import Metrics
from adapters.read_side.engine import ProjectionEngine
from adapters.read_side.event_feed import EventFeed, ensure_feed_stream
from adapters.read_side.positions import ProjectionPositions
from adapters.read_side.queries import PostgresQueries, query_pool
from adapters.read_side.relay import EventRelay, relay_channels
from adapters.read_side.replayed_positions import ReplayedPositions
from adapters.read_side.tracking import tracked_version
from adapters.scraped import JobQueue, Scraped, Source, Tracking
from adapters.store.audit_decoder import Decoder
from adapters.store.blobs import BlobStore
from adapters.store.digest import PostgresDigests
from adapters.store.event_store import EventStore
from adapters.store.keys import KeyRing, service_key
from adapters.store.postgres import PostgresTarget, migrate
from adapters.store.reachability import Reachability, fail_fast
from adapters.store.snapshots import SealedSnapshots
from adapters.store.user_data import PostgresUserData
from entrypoints.projection_process import ProjectionProcess
from entrypoints.read_models import ReadModels, embedder, kept, postgres_read_models, projection_engine
from entrypoints.routes import command_handlers, routes
from entrypoints.servers import Callout, Servers
from entrypoints.settings import Settings
from projections.semantic import SemanticProjection
from projections.view import Projection
from services.artifacts.generation import Generating
from services.artifacts.previews import Previews, ensure_upload_bucket
from services.artifacts.retention import RetentionSweeper
from services.audit.digests import DigestPublisher, Digests
from services.audit.queries import Audit
from services.hitl import queries as hitl_queries
from services.hitl.answers import Answers
from services.hitl.coordinator import ExpirySweeper, SignalRelay
from services.jobs.request import JobRequests
from services.jobs.retrieval import FullTextRetriever
from services.jobs.worker import CONSUMER, JobRelay, JobWorkers, ensure_job_streams, streams
from services.ports.agent import Agent
from services.ports.event_store import Store
from services.ports.generator import Generator
from services.ports.read_models import Queries, SemanticSearch
from services.runtime.command_bus import CommandBus
from services.runtime.cursors import CursorSeal
from services.runtime.snapshots import SnapshotTaker
from services.users.erasure import Erasure

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
    return TokenAuthority.local(settings.data_dir)


class Stage(IntEnum):
    """What `Chronicle.start` brings up, in order; each stage needs the ones before it."""

    DATABASE = 1  # servers, migrations, the key ring, the event store
    BUS = 2  # the command bus (and its snapshots)
    READ = 3  # the projection engine, the query pool, read-your-writes positions
    SERVICE = 4  # NATS: streams, relays, workers, sweepers and the endpoints


SEARCH_EMBED_TIMEOUT = 2.0  # seconds a search waits for an embeddings endpoint
BACKGROUND_POOL_SIZE = 2  # connections to the primary for the service's own reads, when a replica serves queries


@dataclass(frozen=True)
class Overrides:
    """What a test or a script may put in place of what settings would build."""

    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    new_id: Callable[[], UUID] = uuid.uuid4
    authority: TokenAuthority | None = None
    generator: Generator | None = None
    agent: Agent | None = None
    # An event store in place of Postgres (adapters/store/memory.py): the bus runs on it
    # with no server; the read side and the service need Postgres, so start through BUS.
    store: Store | None = None


@dataclass
class Chronicle:
    """One Chronicle instance: built from settings, started stage by stage, stopped in reverse.

    The attributes after `authority` exist once their stage has started."""

    settings: Settings
    overrides: Overrides
    authority: TokenAuthority
    metrics: Metrics  # this process's instruments; `chronicle serve` serves them on settings.metrics_port
    scraped: Scraped  # in metrics' registry: what a scrape reads from Postgres and NATS, once they are started
    target: PostgresTarget = field(init=False)
    read_models: ReadModels = field(init=False)  # which ones this deployment keeps, once Postgres is known
    projections: list[Projection[Any]] = field(init=False)
    keys: KeyRing = field(init=False)
    store: Store = field(init=False)
    postgres_store: EventStore = field(init=False)  # the same store, when it is the Postgres one
    bus: CommandBus = field(init=False)
    engine: ProjectionEngine | ProjectionProcess | None = field(init=False, default=None)
    queries: Queries = field(init=False)  # the primary's read models: what the service itself reads before it acts
    positions: ProjectionPositions = field(init=False)
    # What queries read and wait on: a streaming replica's (settings.read_database_url), or the above.
    read_queries: Queries = field(init=False)
    read_positions: ProjectionPositions = field(init=False)
    nats_url: str = field(init=False, default="")  # what users connect to
    rebuilding: list[str] = field(init=False, default_factory=list)  # read models still rebuilt when it started
    servers: Servers = field(init=False)
    service: NatsService = field(init=False)
    subjects: list[str] = field(init=False, default_factory=list)
    tracking: Tracking = field(init=False)  # read-model and relay positions, read when scraped
    digest_publisher: DigestPublisher | None = field(init=False, default=None)
    retention: RetentionSweeper | None = field(init=False, default=None)
    _stack: contextlib.AsyncExitStack = field(init=False, default_factory=contextlib.AsyncExitStack)

    async def start(self, through: Stage = Stage.SERVICE) -> Chronicle:
        if self.overrides.store is not None and through > Stage.BUS:
            raise ValueError("an event store in place of Postgres runs the bus only: start(through=Stage.BUS)")
        try:
            if self.overrides.store is not None:
                self.store = self.overrides.store
            else:
                await self._start_database(nats=through >= Stage.SERVICE)
            if through >= Stage.BUS:
                self._start_bus()
            if through >= Stage.READ:
                await self._start_reading()
                if through >= Stage.SERVICE:
                    self.rebuilding = await self._read_models_built()
            if through >= Stage.SERVICE:
                await self._start_service()
        except BaseException:
            await self.stop()
            raise
        return self

    async def stop(self) -> None:
        await self._stack.aclose()

    async def _start_database(self, *, nats: bool) -> None:
        """Sets the target, the key ring and the Postgres event store."""
        servers = await asyncio.to_thread(Servers(self.settings).start, nats=nats)
        self._stack.callback(servers.stop)
        self.servers = servers
        self.nats_url = servers.nats_url
        self.target = PostgresTarget(servers.database_url)
        await asyncio.to_thread(migrate, self.target)
        self.read_models = await asyncio.to_thread(kept, self.settings, self.target)
        self.projections = [r.build() for r in postgres_read_models(self.settings, self.read_models.classes)]
        self.keys = KeyRing(self.target)
        self._stack.callback(self.keys.close)
        self.tracking = Tracking(self.target, [p.name for p in self.projections])
        self._scrape("postgres", self.tracking)
        store = await asyncio.to_thread(
            EventStore, self.target, relay_channels=relay_channels([SignalRelay, JobRelay]), keys=self.keys,
            unavailable_after=self.settings.database_unavailable_after,
        )
        self._stack.callback(store.close)
        self.store = self.postgres_store = store

    def _start_bus(self) -> None:
        settings = self.settings
        self.bus = CommandBus(
            self.store,
            command_handlers(),
            failures=DriverFailures(),
            max_batch=settings.group_commit_max_batch,
            cache_size=settings.aggregate_cache_size,
            cache_bytes=settings.aggregate_cache_bytes,
            clock=self.overrides.clock,
            new_id=self.overrides.new_id,
            snapshots=(
                SnapshotTaker(
                    SealedSnapshots(self.postgres_store.snapshot_codec, self.postgres_store.snapshots),
                    settings.snapshot_every,
                    settings.snapshot_keep,
                )
                if self.overrides.store is None
                else None
            ),
            metrics=self.metrics,
        )
        self.bus.start()
        self._stack.callback(self.bus.stop)

    async def _start_reading(self) -> None:
        settings = self.settings
        if settings.run_projections:
            self.engine = (
                ProjectionProcess(settings, self.target)
                if settings.projection_process
                else projection_engine(settings, self.target, self.keys)
            )
            self.engine.start()
            self._stack.callback(self.engine.stop)
        semantic = None
        if SemanticProjection in self.read_models.classes:
            # A search waits for its words' vector briefly, then ranks by full text alone.
            words = embedder(settings, timeout=SEARCH_EMBED_TIMEOUT)
            self._stack.callback(getattr(words, "close", lambda: None))
            semantic = SemanticSearch(words, settings.semantic_min_similarity)
        names = [p.name for p in self.projections]
        reachability = self.postgres_store.reachability  # (one view of whether the primary answers)
        # Every instance seals cursors under the one key kept in the primary (not a key of its
        # own: a client's next page may reach another instance; not one derived from the JWT
        # secret: a deployment verifying RS256 tokens holds only a public key).
        cursors = CursorSeal(await asyncio.to_thread(service_key, self.target, "cursors"))
        # With a replica, the primary's pool serves only the service's own reads (sweepers, digests).
        size = settings.query_pool_size if settings.read_database_url is None else BACKGROUND_POOL_SIZE
        self.queries = await self._queries(self.target.url, reachability, semantic, size, cursors)
        self.positions = await self._positions(ProjectionPositions(self.target, names, reachability=reachability))
        if settings.read_database_url is None:
            self.read_queries, self.read_positions = self.queries, self.positions
            return
        # Queries go to the replica and wait for its replay; a replica that is away makes
        # them `unavailable` within database_unavailable_after, and commands carry on.
        replica = PostgresTarget(settings.read_database_url)
        replica_reachability = Reachability(
            replica.url, settings.database_unavailable_after, is_statement_failure=statement_failed
        )
        self.read_queries = await self._queries(
            replica.url, replica_reachability, semantic, settings.query_pool_size, cursors
        )
        self.read_positions = await self._positions(ReplayedPositions(replica, names, reachability=replica_reachability))
        log.info("queries are served by a replica", extra={"replica": replica.describe()})

    async def _queries(
        self, url: str, reachability: Reachability, semantic: SemanticSearch | None, size: int, cursors: CursorSeal
    ) -> Queries:
        settings = self.settings
        pool = query_pool(url, min_size=min(2, size), max_size=size, application_name=f"{settings.service_name}-queries")
        fail_fast(pool, settings.database_unavailable_after)  # a read waits no longer for Postgres
        await pool.open()
        self._stack.push_async_callback(pool.close)
        return PostgresQueries(
            pool, language=settings.search_language, reachability=reachability, semantic=semantic, cursors=cursors
        )

    async def _positions(self, positions: ProjectionPositions) -> ProjectionPositions:
        await positions.start()
        self._stack.push_async_callback(positions.stop)
        return positions

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
        settings, bus, queries, keys, stack = self.settings, self.bus, self.queries, self.keys, self._stack
        # What callers read goes to read_queries (a replica, when one is set) and waits on
        # read_positions; what the service reads to decide what to do next reads the primary.
        reading, read_positions = self.read_queries, self.read_positions
        prefix = settings.subject_prefix
        nc = await nats.connect(**connect_options(self.servers.service_nats_url), name=settings.service_name, max_reconnect_attempts=-1,
                                reconnect_time_wait=0.5, error_cb=nats_error)
        stack.push_async_callback(nc.drain)
        if self.servers.callout is not None:
            await self._answer_callouts(self.servers.callout)
        js = nc.jetstream()
        # Signals once kept their content in a stream, and orchestrators noted the answers
        # they took in a bucket; both are gone (services/hitl/coordinator.py).
        for stream in (hitl_stream(prefix), f"KV_{hitl_taken_bucket(prefix)}"):
            if await remove_stream(js, stream):
                log.info("removed a stream of an earlier version", extra={"stream": stream})
        jet_streams = JetStreams(js, settings.stream_replicas)
        await ensure_upload_bucket(jet_streams, prefix)
        await ensure_job_streams(jet_streams, prefix, settings.job_ack_wait)
        self._scrape("nats", JobQueue(js, streams(prefix)[0], CONSUMER, asyncio.get_running_loop()))
        job_relay = EventRelay(self.target.url, JobRelay(nc, js, prefix), keys)
        await self._run(job_relay)
        bus.commit_listeners.append(job_relay.committed)
        if settings.job_workers > 0:
            agent = self.overrides.agent or self._closed_with_service(agent_for(settings))
            await self._run(JobWorkers(js, prefix, bus, agent, settings.job_workers))
        blobs = BlobStore(self.target, keys)
        stack.callback(blobs.close)
        previews = Previews(bus, blobs, reading, js, prefix)
        if settings.artifact_retention_days > 0 or settings.artifact_max_per_session > 0:
            self.retention = RetentionSweeper(
                queries,
                self.positions,
                bus.execute,
                retention_days=settings.artifact_retention_days,
                max_per_session=settings.artifact_max_per_session,
                interval=settings.retention_interval,
            )
            await self._run(self.retention)
        # Every instance relays and sweeps: relays serialise on their tracking row (each
        # instance's own commits go out at once by the fast path) and a second expiry of
        # a checkpoint is a no-op.
        signal_relay = EventRelay(self.target.url, SignalRelay(nc, prefix), keys)
        await self._run(signal_relay)
        bus.commit_listeners.append(signal_relay.committed)
        await self._run(ExpirySweeper(functools.partial(hitl_queries.due_runs, queries), bus.execute))
        self.tracking.relays.update({SignalRelay.name: signal_relay.name, JobRelay.name: job_relay.name})
        if settings.event_feed:
            await ensure_feed_stream(js, prefix, settings.event_feed_max_age, settings.stream_replicas)
            feed = EventFeed(self.target.url, nc, js, prefix)
            await self._run(feed)
            self.tracking.relays[EventFeed.name] = feed.name
        # Every instance may publish digests too: the digest stream records one per position.
        if settings.digest_interval > 0:
            self.digest_publisher = DigestPublisher(
                PostgresDigests(self.target), Digests(queries, self.postgres_store.mapper), bus.execute,
                settings.digest_interval,
            )
            await self._run(self.digest_publisher)

        async def record_read(auditor: str, read: dict[str, Any]) -> None:
            await bus.execute(RecordRead(**read), auditor)

        # The instances that dispatch tables' Read and Serve handlers are methods of, by type.
        served: dict[type, object] = {
            Queries: reading,
            Generating: Generating(bus, self.overrides.generator or self._closed_with_service(generator_for(settings))),
            Previews: previews,
            # (A job's retrieval snapshot waits for the caller's min_position, as a query does.)
            JobRequests: JobRequests(bus, FullTextRetriever(reading), read_positions, settings.query_wait_timeout),
            Audit: Audit(reading, record_read, Decoder(keys)),  # (keys from the primary: an erasure counts at once)
            Digests: Digests(reading, self.postgres_store.mapper),
            Erasure: Erasure(bus, keys, PostgresUserData(self.target), forget=[previews.forget_uploads]),
            Answers: Answers(bus, self.postgres_store.events_of),
        }
        limits = Limits(
            per_minute={
                "requests": settings.limit_requests_per_minute, "search": settings.limit_search_per_minute,
                "export": settings.limit_export_per_minute, "heavy": settings.limit_heavy_per_minute,
            },
            in_flight=settings.limit_in_flight_per_user,
            bulk_factor=settings.limit_bulk_factor,
        )
        shared = limits.rates_limited and settings.limit_sync_interval > 0
        fair_share = FairShare(
            limits, report_every=settings.limit_sync_interval if shared else 0.0, metrics=self.metrics
        )
        if shared:
            # Started before the endpoints and stopped after them: its last report holds
            # what they served while draining.
            await self._run(UsageSync(nc, usage_subject(prefix), fair_share, every=settings.limit_sync_interval))
        self.service = NatsService(
            nc,
            routes(prefix, bus, read_positions, settings.query_wait_timeout, served),
            self.authority,
            name=settings.service_name,
            max_in_flight=settings.max_in_flight,
            check_replies=settings.check_replies,
            scoped_inboxes=self.servers.callout is not None,
            max_json_bytes=settings.max_json_bytes,
            fair_share=fair_share,
            metrics=self.metrics,
        )
        await self.service.start()
        stack.push_async_callback(self.service.stop)
        self.subjects = [r.subject for r in self.service.routes]

    async def _answer_callouts(self, callout: Callout) -> None:
        """Users' connections are authorized here: their bearer token, checked as on every
        request, and their permissions (clients/python/chronicle_contract/bus.py)."""
        settings = self.settings

        async def connect() -> NATS:
            return await nats.connect(**connect_options(callout.url), name=f"{settings.service_name}-auth",
                                      max_reconnect_attempts=-1, reconnect_time_wait=0.5, error_cb=nats_error)

        # On a thread of its own: a flood of bad connects does not queue behind requests, nor they behind it.
        await self._run(CalloutThread(connect, lambda nc: AuthCallout(
            nc, callout.issuer_seed, verify=self.authority.verify, account=settings.nats_account,
            permissions=functools.partial(user_permissions, settings.subject_prefix),
        )))

    def _scrape(self, name: str, source: Source) -> None:
        """Have scrapes read `source` until this instance stops."""
        self.scraped.sources[name] = source
        self._stack.callback(self.scraped.sources.pop, name, None)

    def _closed_with_service(self, adapter: AdapterT) -> AdapterT:
        aclose = getattr(adapter, "aclose", None)  # the OpenAI ones hold an HTTP client
        if aclose is not None:
            self._stack.push_async_callback(aclose)
        return adapter

    async def _run(self, component: Startable) -> None:
        await component.start()
        self._stack.push_async_callback(component.stop)


async def nats_error(error: Exception) -> None:
    """A NATS connection's asynchronous error, as a log line (nats-py would print it raw)."""
    log.warning("nats error", extra={"error_type": type(error).__name__, "error": str(error)[:200]})


AdapterT = TypeVar("AdapterT")


class Startable(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


def build(settings: Settings, overrides: Overrides | None = None) -> Chronicle:
    """Every choice the settings make, resolved; nothing connected or started."""
    overrides = overrides or Overrides()
    metrics, scraped = Metrics(), Scraped()
    metrics.registry.register(scraped)
    return Chronicle(
        settings=settings,
        overrides=overrides,
        authority=overrides.authority or authority_for(settings),
        metrics=metrics,
        scraped=scraped,
    )


async def bootstrap(settings: Settings, **overrides: Any) -> Chronicle:
    """Build and start a whole Chronicle (what `chronicle serve` runs)."""
    return await build(settings, Overrides(**overrides)).start()
