"""Each capability's pieces, wired: one function per capability, called by `build()`.

A wiring function builds what its capability adds beside its dispatch table (the instances
the table's Read and Serve handlers are methods of, the streams it needs, the relays,
workers and sweepers that run beside the requests) from the shared pieces in `Core`. It
connects to nothing: what it returns is started by `Chronicle.start()` (entrypoints/bootstrap.py)
in the service stage, in order, and stopped in reverse. Adding a piece that runs with the
service is one more entry in its capability's `Wiring`; a new capability, one more function
here and its name in `build()`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chronicle_contract.audit import RecordRead
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from adapters.messaging.identities import Role
from adapters.messaging.jetstream import JetStreams
from adapters.read_side.event_feed import EventFeed, ensure_feed_stream, feed_position
from adapters.read_side.positions import ProjectionPositions
from adapters.read_side.queries import PostgresQueries
from adapters.read_side.relay import EventRelay
from adapters.scraped import JobQueue, Scraped, Tracking
from adapters.store.audit_decoder import Decoder
from adapters.store.blobs import BlobStore
from adapters.store.digest import PostgresDigests
from adapters.store.event_store import EventStore
from adapters.store.hash_chains import PostgresChains
from adapters.store.kek import AttachedKeks
from adapters.store.kek_rotation import PostgresKeyRotation
from adapters.store.keys import KeyRing, service_key
from adapters.store.postgres import PostgresTarget
from adapters.store.user_data import PostgresUserData
from entrypoints.settings import Settings
from services.artifacts.generation import Generating
from services.artifacts.previews import Previews, ensure_upload_bucket
from services.artifacts.retention import RetentionSweeper
from services.audit.chains import ChainCheck
from services.audit.digests import DigestPublisher, Digests
from services.audit.queries import Audit
from services.hitl import queries as hitl_queries
from services.hitl.answers import Answers
from services.hitl.coordinator import ExpirySweeper, SignalRelay
from services.jobs.request import JobRequests
from services.jobs.retrieval import FullTextRetriever
from services.jobs.worker import CONSUMER, JobOrders, JobRelay, JobWorkers, ensure_job_streams, streams
from services.ports.agent import Agent
from services.ports.generator import Generator
from services.ports.read_models import Queries
from services.ports.streams import Streams
from services.runtime.command_bus import CommandBus
from services.users.erasure import Erasure
from services.users.rotation import KeyRotator


class Startable(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


@dataclass(frozen=True)
class ServiceConnections:
    """The service's NATS clients, one per job (adapters/messaging/identities.py): each is
    connected on start as its role and, on a bus with the auth callout, may publish only that
    role's subjects, so no request can aim the service at anything else."""

    responder: NATS = field(default_factory=NATS)  # answers requests: users' inboxes only
    signals: NATS = field(default_factory=NATS)  # HITL and job progress signals
    jobs: NATS = field(default_factory=NATS)  # the work queue: put and pulled
    feed: NATS = field(default_factory=NATS)  # the event feed
    usage: NATS = field(default_factory=NATS)  # the instances' usage reports
    streams: NATS = field(default_factory=NATS)  # streams, consumers and object stores

    def by_role(self) -> dict[Role, NATS]:
        return {role: getattr(self, role.value) for role in Role}


@dataclass(frozen=True)
class Core:
    """The pieces every capability's wiring may use, built before any of them."""

    settings: Settings
    target: PostgresTarget  # the primary
    keks: AttachedKeks  # what wraps the data keys and service keys, outside Postgres (attached on start)
    keys: KeyRing
    postgres_store: EventStore
    bus: CommandBus
    queries: PostgresQueries  # the primary's read models: what the service reads before it acts
    positions: ProjectionPositions
    # What callers read and wait on: a streaming replica's (settings.read_database_url), or the above.
    read_queries: PostgresQueries
    read_positions: ProjectionPositions
    nats: ServiceConnections  # opened on start
    js: JetStreamContext  # the streams connection's
    streams: JetStreams  # what makes the streams and stores the capabilities need, on js
    tracking: Tracking
    scraped: Scraped


@dataclass
class Wiring:
    """What one capability adds to the service beside its dispatch table."""

    served: dict[type, object] = field(default_factory=dict)  # the instances its Read and Serve handlers are methods of
    streams: list[Callable[[Streams], Awaitable[None]]] = field(default_factory=list)  # made on start, before `running`
    running: list[Startable] = field(default_factory=list)  # started with the service in order, stopped in reverse


class Relaying:
    """A relay, heard by the command bus after each of its commits while it runs (the fast path)."""

    def __init__(self, relay: EventRelay, bus: CommandBus) -> None:
        self.relay = relay
        self.bus = bus

    async def start(self) -> None:
        await self.relay.start()
        self.bus.commit_listeners.append(self.relay.committed)

    async def stop(self) -> None:
        if self.relay.committed in self.bus.commit_listeners:
            self.bus.commit_listeners.remove(self.relay.committed)
        await self.relay.stop()


class Opening:
    """A piece opened and closed by blocking calls (a connection pool), off the event loop."""

    def __init__(self, open: Callable[[], object], close: Callable[[], object]) -> None:
        self.open = open
        self.close = close

    async def start(self) -> None:
        await asyncio.to_thread(self.open)

    async def stop(self) -> None:
        await asyncio.to_thread(self.close)


class Closing:
    """What holds a client of its own (the OpenAI adapters' HTTP client): closed with the
    service when the composition root made it (not when a test handed it in)."""

    def __init__(self, adapter: object) -> None:
        self.adapter = adapter

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        aclose = getattr(self.adapter, "aclose", None)
        if aclose is not None:
            await aclose()


class SignedOrders:
    """Gives the job orders their signing key on start: the one every instance on the
    database shares (adapters/store/keys.py service_key), so any worker checks any order."""

    def __init__(self, orders: JobOrders, target: PostgresTarget, keks: AttachedKeks) -> None:
        self.orders = orders
        self.target = target
        self.keks = keks

    async def start(self) -> None:
        self.orders.use(await asyncio.to_thread(service_key, self.target, "jobs", self.keks))

    async def stop(self) -> None:
        pass


class ScrapedJobQueue:
    """The job queue's depth in scrapes while the service runs (read on its event loop)."""

    def __init__(self, scraped: Scraped, js: JetStreamContext, prefix: str) -> None:
        self.scraped = scraped
        self.js = js
        self.prefix = prefix

    async def start(self) -> None:
        self.scraped.sources["nats"] = JobQueue(self.js, streams(self.prefix)[0], CONSUMER, asyncio.get_running_loop())

    async def stop(self) -> None:
        self.scraped.sources.pop("nats", None)


def relayed(core: Core, relay: JobRelay | SignalRelay) -> Relaying:
    following = EventRelay(lambda: core.target.url, relay, core.keys)
    core.tracking.relays[relay.name] = following.name
    return Relaying(following, core.bus)


def wire_read_models(core: Core) -> Wiring:
    """Sessions, conversations and optimizations: commands go to the bus, and their reads are
    the read models' (`Queries`)."""
    return Wiring(served={Queries: core.read_queries})


def wire_hitl(core: Core) -> Wiring:
    """Signals out of paused and resumed runs, expiry of checkpoints whose time is up, and
    the answers orchestrators take. (Every instance relays and sweeps: relays serialise on
    their tracking row, and a second expiry of a checkpoint is a no-op.)"""
    prefix = core.settings.subject_prefix
    return Wiring(
        served={Answers: Answers(core.bus, core.postgres_store.events_of)},
        running=[
            relayed(core, SignalRelay(core.nats.signals, prefix)),
            ExpirySweeper(functools.partial(hitl_queries.due_runs, core.queries), core.bus.execute),
        ],
    )


@dataclass
class Artifacts(Wiring):
    """The artifacts' wiring, and the pieces others reach for: erasure forgets a user's
    uploads through the previews; tests look at the retention sweeper."""

    previews: Previews | None = None
    retention: RetentionSweeper | None = None


def wire_artifacts(core: Core, generator: Generator) -> Artifacts:
    """Generation, previews (their bytes in the blob store, uploads in an object store) and
    retention, when settings ask for it."""
    settings, prefix = core.settings, core.settings.subject_prefix
    blobs = BlobStore(core.target, core.keys)
    previews = Previews(core.bus, blobs, core.read_queries, core.js, prefix)
    retention = None
    if settings.artifact_retention_days > 0 or settings.artifact_max_per_session > 0:
        retention = RetentionSweeper(
            core.queries,
            core.positions,
            core.bus.execute,
            retention_days=settings.artifact_retention_days,
            max_per_session=settings.artifact_max_per_session,
            interval=settings.retention_interval,
        )
    return Artifacts(
        served={Generating: Generating(core.bus, generator), Previews: previews},
        streams=[functools.partial(ensure_upload_bucket, prefix=prefix)],
        running=[Opening(blobs.open_pool, blobs.close), *([retention] if retention else [])],
        previews=previews,
        retention=retention,
    )


@dataclass
class Jobs(Wiring):
    """The jobs' wiring, and this instance's workers (whose refusals tests count)."""

    workers: JobWorkers | None = None


def wire_jobs(core: Core, agent: Agent | None) -> Jobs:
    """Job requests (their retrieval snapshot waits for the caller's min_position, as a query
    does), the work queue, its relay and this instance's workers (with `agent`; none without)."""
    settings, prefix = core.settings, core.settings.subject_prefix
    requests = JobRequests(
        core.bus, FullTextRetriever(core.read_queries), core.read_positions, settings.query_wait_timeout
    )
    orders = JobOrders()  # (workers take only orders the service signed)
    queue = core.nats.jobs.jetstream()
    workers = None
    if agent is not None and settings.job_workers > 0:
        workers = JobWorkers(queue, prefix, core.bus, agent, settings.job_workers, orders)
    return Jobs(
        served={JobRequests: requests},
        streams=[functools.partial(ensure_job_streams, prefix=prefix, ack_wait=settings.job_ack_wait)],
        running=[
            SignedOrders(orders, core.target, core.keks),
            ScrapedJobQueue(core.scraped, core.js, prefix),
            relayed(core, JobRelay(core.nats.signals, queue, prefix, orders)),
            *([workers] if workers else []),
        ],
        workers=workers,
    )


@dataclass
class AuditWiring(Wiring):
    """The audit's wiring, and its digest publisher (which tests drive)."""

    digest_publisher: DigestPublisher | None = None


def wire_audit(core: Core) -> AuditWiring:
    """The audit stream (each auditor's read recorded on their own trail), digests and their
    publisher, and the outgoing event feed."""
    settings, bus = core.settings, core.bus

    async def record_read(auditor: str, read: dict[str, Any]) -> None:
        await bus.execute(RecordRead(**read), auditor)

    audit = Audit(core.read_queries, record_read, Decoder(core.keys))  # (keys from the primary: an erasure counts at once)
    wiring = AuditWiring(served={
        Audit: audit,
        ChainCheck: ChainCheck(audit, PostgresChains(core.read_queries)),
        Digests: Digests(core.read_queries, core.postgres_store.mapper),
    })
    if settings.event_feed:
        prefix = settings.subject_prefix
        core.tracking.relays[EventFeed.name] = feed_position(prefix)
        wiring.streams.append(
            lambda _: ensure_feed_stream(core.js, prefix, settings.event_feed_max_age, settings.stream_replicas)
        )
        if not settings.feed_process:  # (otherwise its child process starts with the service: bootstrap)
            wiring.running.append(EventFeed(
                lambda: core.target.url, core.nats.feed, core.nats.feed.jetstream(), prefix, settings.feed_batch_interval,
            ))
    # Every instance may publish digests: the digest stream records one per position.
    if settings.digest_interval > 0:
        wiring.digest_publisher = DigestPublisher(
            PostgresDigests(core.target), Digests(core.queries, core.postgres_store.mapper), bus.execute,
            settings.digest_interval,
        )
        wiring.running.append(wiring.digest_publisher)
    return wiring


def wire_users(core: Core, forget: list[Callable[[str], Awaitable[None]]]) -> Wiring:
    """Erasure: the user's key destroyed, their stored replies and blobs deleted, and
    whatever else `forget` names (the uploads waiting in the object store); then, within the
    erasure epoch, the key-encryption key rotated."""
    return Wiring(
        served={Erasure: Erasure(core.bus, core.keys, PostgresUserData(core.target), forget=forget)},
        # Every instance runs a rotator; one at a time rotates (services/users/rotation.py).
        running=[KeyRotator(PostgresKeyRotation(core.target, core.keks), core.settings.erasure_epoch)],
    )
