"""The composition root: builds every piece from settings; tests pass overrides in."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO
from uuid import UUID

import nats

from adapters.agent_offline import OfflineAgent
from adapters.agent_openai import OpenAIAgent
from adapters.auth import TokenAuthority
from adapters.blobs import BlobStore
from adapters.embedded import EmbeddedNats, EmbeddedPostgres
from adapters.event_store import EventStore
from adapters.generator_offline import OfflineGenerator
from adapters.generator_openai import OpenAICompatibleGenerator
from adapters.jetstream import ensure_key_value, ensure_stream
from adapters.keys import KeyRing
from adapters.nats_service import NatsService
from adapters.postgres import PostgresTarget, migrate
from projections.artifacts import ArtifactsProjection
from projections.audit import AuditProjection
from projections.base import Projection
from projections.engine import ProjectionEngine
from projections.history import HistoryProjection
from projections.hitl import HitlProjection
from projections.jobs import JobsProjection
from projections.lineage import LineageProjection
from projections.optimizations import OptimizationsProjection
from projections.search import SearchProjection
from projections.stats import StatsProjection
from services.agent import Agent
from services.api import routes
from services.command_bus import CommandBus
from services.commands import COMMANDS, INTERNAL_COMMANDS
from services.contract import hitl_stream, hitl_taken_bucket
from services.digests import DigestPublisher, Digests
from services.generation import Generating
from services.generator import Generator
from services.hitl_coordinator import ExpirySweeper, SignalRelay
from services.job_worker import JobRelay, JobWorkers, ensure_job_streams
from services.jobs import Jobs
from services.positions import ProjectionPositions
from services.previews import Previews, ensure_upload_bucket
from services.projection_process import ProjectionProcess
from services.queries import Queries, query_pool
from services.retention import RetentionSweeper
from services.retriever import FullTextRetriever
from services.settings import Settings
from services.snapshots import SnapshotTaker

log = logging.getLogger(__name__)

PROJECTIONS: list[type[Projection]] = [
    HistoryProjection,
    StatsProjection,
    SearchProjection,
    HitlProjection,
    OptimizationsProjection,
    LineageProjection,
    AuditProjection,
    ArtifactsProjection,
    JobsProjection,
]


def projection_options(settings: Settings, projection_class: type[Projection]) -> dict[str, object]:
    return {"language": settings.search_language} if projection_class is SearchProjection else {}


def projection_engine(settings: Settings, target: PostgresTarget) -> ProjectionEngine:
    return ProjectionEngine(
        target,
        build_projections(settings),
        settings.projection_batch_size,
        settings.read_model_vacuum_every,
        settings.projection_threads,
    )


def command_handlers() -> dict[str, object]:
    return {name: handler for name, (_, handler) in (COMMANDS | INTERNAL_COMMANDS).items()}


def build_projections(settings: Settings) -> list[Projection]:
    return [p(**projection_options(settings, p)) for p in PROJECTIONS]


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


@dataclass
class Servers:
    """The database and NATS URLs in use, starting embedded servers for the missing ones."""

    settings: Settings
    database_url: str = ""
    nats_url: str = ""
    started: list[EmbeddedPostgres | EmbeddedNats] = field(default_factory=list)
    _lock: IO[str] | None = None

    def start(self) -> Servers:
        if not (self.settings.database_url and self.settings.nats_url):
            self._lock_data_dir()
        self.database_url = self.settings.database_url or self._embed(EmbeddedPostgres(self.settings.data_dir))
        self.nats_url = self.settings.nats_url or self._embed(EmbeddedNats(self.settings.data_dir))
        return self

    def _lock_data_dir(self) -> None:
        """One process at a time runs embedded servers on a data dir."""
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.settings.data_dir / "serve.lock", "w")  # noqa: SIM115  # held until stop
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise RuntimeError(
                f"another Chronicle process runs embedded servers on {self.settings.data_dir}; "
                "stop it, or set CHRONICLE_DATA_DIR / the server URLs"
            ) from None

    def _embed(self, server: EmbeddedPostgres | EmbeddedNats) -> str:
        url = server.start()
        self.started.append(server)
        return url

    def stop(self) -> None:
        while self.started:
            self.started.pop().stop()
        if self._lock is not None:
            self._lock.close()
            self._lock = None


@dataclass
class Chronicle:
    """A running Chronicle instance and what it started, stopped in reverse order."""

    settings: Settings
    target: PostgresTarget
    nats_url: str
    store: EventStore
    bus: CommandBus
    engine: ProjectionEngine | ProjectionProcess | None
    queries: Queries
    positions: ProjectionPositions
    service: NatsService
    subjects: list[str]
    _stack: contextlib.AsyncExitStack
    digest_publisher: DigestPublisher | None = None
    retention: RetentionSweeper | None = None

    async def stop(self) -> None:
        await self._stack.aclose()


async def bootstrap(
    settings: Settings,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    new_id: Callable[[], UUID] = uuid.uuid4,
    authority: TokenAuthority | None = None,
    generator: Generator | None = None,
    agent: Agent | None = None,
) -> Chronicle:
    stack = contextlib.AsyncExitStack()
    try:
        servers = await asyncio.to_thread(Servers(settings).start)
        stack.callback(servers.stop)
        target = PostgresTarget(servers.database_url)
        await asyncio.to_thread(migrate, target)

        keys = KeyRing.shared(target)
        relay_channels = {**SignalRelay.topics_by_channel(), **JobRelay.topics_by_channel()}
        store = await asyncio.to_thread(EventStore, target, relay_channels=relay_channels, keys=keys)
        stack.callback(store.close)
        bus = CommandBus(
            store,
            command_handlers(),
            max_batch=settings.group_commit_max_batch,
            cache_size=settings.aggregate_cache_size,
            clock=clock,
            new_id=new_id,
            snapshots=SnapshotTaker(store, settings.snapshot_every, settings.snapshot_keep),
        )
        bus.start()
        stack.callback(bus.stop)

        engine: ProjectionEngine | ProjectionProcess | None = None
        if settings.run_projections:
            engine = ProjectionProcess(settings, target) if settings.projection_process else projection_engine(settings, target)
            engine.start()
            stack.callback(engine.stop)

        pool = query_pool(target.url, min_size=2, max_size=settings.query_pool_size)
        await pool.open()
        stack.push_async_callback(pool.close)
        queries = Queries(pool, language=settings.search_language)
        positions = ProjectionPositions(target, [p.name for p in PROJECTIONS])
        await positions.start()
        stack.push_async_callback(positions.stop)

        nc = await nats.connect(
            servers.nats_url, name=settings.service_name, max_reconnect_attempts=-1, reconnect_time_wait=0.5
        )
        stack.push_async_callback(nc.drain)
        js = nc.jetstream()
        await ensure_stream(
            js, hitl_stream(settings.subject_prefix), [f"{settings.subject_prefix}.hitl.>"], allow_direct=True
        )
        await ensure_key_value(js, hitl_taken_bucket(settings.subject_prefix))
        await ensure_upload_bucket(js, settings.subject_prefix)
        await ensure_job_streams(js, settings.subject_prefix, settings.job_ack_wait)
        job_relay = JobRelay(target.url, js, settings.subject_prefix, keys)
        await job_relay.start()
        stack.push_async_callback(job_relay.stop)
        bus.commit_listeners.append(job_relay.committed)
        if settings.job_workers > 0:
            if agent is None:
                agent = agent_for(settings)
                if isinstance(agent, OpenAIAgent):
                    stack.push_async_callback(agent.aclose)
            workers = JobWorkers(js, settings.subject_prefix, bus, agent, settings.job_workers)
            await workers.start()
            stack.push_async_callback(workers.stop)
        blobs = BlobStore(target, keys)
        stack.callback(blobs.close)
        previews = Previews(bus, blobs, queries, js, settings.subject_prefix)
        if generator is None:
            generator = generator_for(settings)
            if isinstance(generator, OpenAICompatibleGenerator):
                stack.push_async_callback(generator.aclose)
        generating = Generating(bus, generator)
        retention = None
        if settings.artifact_retention_days > 0 or settings.artifact_max_per_session > 0:
            retention = RetentionSweeper(
                queries,
                positions,
                bus.execute,
                retention_days=settings.artifact_retention_days,
                max_per_session=settings.artifact_max_per_session,
                interval=settings.retention_interval,
            )
            await retention.start()
            stack.push_async_callback(retention.stop)
        # Every instance relays and sweeps: relays serialise on their tracking row (each
        # instance's own commits go out at once by the fast path) and a second expiry of
        # a checkpoint is a no-op.
        relay = SignalRelay(target.url, js, settings.subject_prefix, keys)
        await relay.start()
        stack.push_async_callback(relay.stop)
        bus.commit_listeners.append(relay.committed)
        sweeper = ExpirySweeper(queries.due_runs, bus.execute)
        await sweeper.start()
        stack.push_async_callback(sweeper.stop)
        # Every instance may publish digests too: the digest stream records one per position.
        digest_publisher = None
        if settings.digest_interval > 0:
            digests = Digests(queries, store.mapper)
            digest_publisher = DigestPublisher(target, digests, bus.execute, settings.digest_interval)
            await digest_publisher.start()
            stack.push_async_callback(digest_publisher.stop)
        service = NatsService(
            nc,
            routes(
                settings.subject_prefix,
                bus,
                queries,
                positions,
                settings.query_wait_timeout,
                generating,
                previews,
                Jobs(bus, FullTextRetriever(queries), positions, settings.query_wait_timeout),
            ),
            authority or authority_for(settings),
            name=settings.service_name,
            max_in_flight=settings.max_in_flight,
        )
        await service.start()
        stack.push_async_callback(service.stop)
    except BaseException:
        await stack.aclose()
        raise
    return Chronicle(
        settings=settings,
        target=target,
        nats_url=servers.nats_url,
        store=store,
        bus=bus,
        engine=engine,
        queries=queries,
        positions=positions,
        service=service,
        subjects=[r.subject for r in service.routes],
        _stack=stack,
        digest_publisher=digest_publisher,
        retention=retention,
    )
