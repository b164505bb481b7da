"""`./dev bench artifacts`: artifacts.get, .lineage, .search, variation sets and store over a large store.

Seeds `--artifacts` artifacts straight into a fresh database (Stored events made by the real
Artifact aggregate, with deterministic ids and timestamps, sealed per owner as the service
writes them; one generation session per 100 artifacts of a user; 30% refinements of one of
the user's recent artifacts; 0-3 RAG examples each; queries of Zipf-shaped words so search
meets common and rare ones; layouts of 10-40 nodes from the built-in offline generator).
One more user owns a `--chain`-long line of refinements, interleaved with the rest. Then
starts `chronicle serve`, times the initial build of its read models, and measures over NATS
with the typed client, one request in flight, each request with its owner's token. Aims
(the artifacts issue): artifacts.get p95 under 10 ms (the old design asked 100 ms), a
variation set of 5 end to end under 200 ms (the old design asked 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

from chronicle_client.connection import ChronicleClient
from eventsourcing.persistence import StoredEvent
from nats.aio.client import Client as NATS

from adapters.generation.generator_offline import OfflineGenerator
from adapters.read_side.views.semantic import semantic_support
from adapters.store.mapper import PydanticMapper
from adapters.store.postgres import PostgresTarget, migrate
from bench.corpus import Corpus
from bench.load import SEARCH_KINDS, Samples, connect, search_words, sequential
from bench.report import Report, over, percentile, under
from bench.run import READ_MODELS, Every, build_read_models, say
from bench.seed import EPOCH, HISTORY_SPAN, RARE_WORDS_KEPT, insert_all, random_uuid
from bench.servers import add_server_options, bench_servers
from bench.service import ServiceProcess, add_service_setting_option, service_settings
from domain.artifact import Artifact, GenerationStats, RagExample
from domain.layout import shape_of
from domain.session import Session
from services.ports.generator import GenerationRequest

GET_AIM_MS = 10.0  # the old design asked for 100 ms
VARIATIONS_AIM_MS = 200.0  # the old design asked for 5 s
LAYOUTS = 200  # pre-generated and reused: the offline generator takes ~0.4 ms a layout
LAYOUT_NODES = (10, 40)
SESSION_SIZE = 100  # artifacts per generation session
REFINED_SHARE = 0.3
RECENT_KEPT = 10  # a user's recent artifacts, the ones a refinement may start from
STORED_SHARE = 0.1  # of the roots: stored by a client as they are, not generated
RAG_POOL = 10_000
SAMPLED = 10_000  # artifacts kept (uniformly, by reservoir) for artifacts.get to pick from
VARIATIONS = 5
CHAIN_OWNER = "bench-chain-owner"
REQUEST_TIMEOUT = 30.0
# Seeding transactions close at this many bytes whatever their event count, so they stay
# the size of a busy group commit. (Found here: psycopg's pipeline mode hung for good on an
# insert of ~10 MB; the recorder no longer uses it, see adapters/store/event_store.py.)
MAX_INSERT_BYTES = 4 * 1024 * 1024
QUERY_OPENERS = ("Landing page for", "Dashboard showing", "Signup form about", "Report page on",
                 "Settings screen for", "Product page with", "Checkout flow for", "Help center on")


@dataclass(frozen=True)
class Plan:
    artifacts: int = 1_000_000  # in all, the chain's included
    users: int = 1_000
    chain: int = 1_000
    get_requests: int = 500
    search_requests: int = 200
    lineage_requests: int = 50
    variation_requests: int = 50
    store_requests: int = 200
    seed: int = 1
    batch_size: int = 5_000
    phase_time_limit: float = 180.0
    build_timeout: float = 7_200.0
    database_url: str | None = None
    nats_url: str | None = None
    embedded_postgres: bool = False
    keep: bool = False
    service_settings: dict[str, str] = field(default_factory=dict)


QUICK = {"artifacts": 20_000, "users": 200, "chain": 200}
REQUESTS = ("get_requests", "search_requests", "lineage_requests", "variation_requests", "store_requests")
SEMANTIC_RECALL_AIM = 90  # % of misspelt queries whose artifact is among the 20 hits


@dataclass
class Seeded:
    """What the measurements need to know about the seeded artifacts."""

    users: list[str]
    sample: list[tuple[UUID, str]] = field(default_factory=list)  # (artifact, owner)
    rare_words: dict[str, list[str]] = field(default_factory=dict)
    session_of: dict[str, UUID] = field(default_factory=dict)  # each user's newest session
    chain: list[UUID] = field(default_factory=list)  # root first
    layouts: list[tuple[dict[str, Any], str, int]] = field(default_factory=list)  # (layout, draft, nodes)
    artifacts: int = 0
    refinements: int = 0
    sessions: int = 0
    events: int = 0
    seconds: float = 0.0


@dataclass
class History:
    """One user's open session and recent artifacts while seeding."""

    session_id: UUID | None = None
    in_session: int = 0
    recent: deque[Artifact] = field(default_factory=lambda: deque(maxlen=RECENT_KEPT))


def layout_pool(corpus: Corpus, rng: random.Random) -> list[tuple[dict[str, Any], str, int]]:
    """LAYOUTS (layout, draft, node count) from the offline generator, each of 10-40 nodes."""
    generator = OfflineGenerator()
    low, high = LAYOUT_NODES

    async def generate() -> list[tuple[dict[str, Any], str, int]]:
        pool: list[tuple[dict[str, Any], str, int]] = []
        while len(pool) < LAYOUTS:
            request = GenerationRequest(query=query_text(corpus, rng)[0], temperature=round(rng.uniform(0.3, 1.0), 2),
                                        style_variety=round(rng.random(), 2))
            made = await generator.generate(request)
            nodes = shape_of(made.layout).node_count
            if low <= nodes <= high:
                pool.append((made.layout, made.draft, nodes))
        return pool

    return asyncio.run(generate())


def query_text(corpus: Corpus, rng: random.Random) -> tuple[str, list[str]]:
    words, rare = corpus.text(rng.randint(4, 14))
    return f"{rng.choice(QUERY_OPENERS)} {words[0].lower()}{words[1:]}", rare


class ArtifactHistory:
    """Every seeded event in log order: sessions opened as they are needed, then artifacts."""

    def __init__(self, plan: Plan, seeded: Seeded):
        self.plan, self.seeded = plan, seeded
        self.rng = random.Random(plan.seed)
        self.corpus = Corpus(random.Random(plan.seed + 1))
        seeded.layouts = layout_pool(self.corpus, random.Random(plan.seed + 2))
        self.histories = {user: History() for user in [*seeded.users, CHAIN_OWNER]}

    def events(self) -> Iterator[Any]:
        plan, spacing = self.plan, HISTORY_SPAN / self.plan.artifacts
        for index in range(plan.artifacts):
            at = EPOCH + spacing * index
            # The chain's links are spread evenly through the log, as a long-lived line of work is.
            if len(self.seeded.chain) < plan.chain and index * plan.chain >= len(self.seeded.chain) * plan.artifacts:
                yield from self.chain_link(at)
            else:
                yield from self.artifact(self.rng.choice(self.seeded.users), at)

    def session(self, owner: str, at: datetime) -> Iterator[Any]:
        history = self.histories[owner]
        if history.session_id is None or history.in_session >= SESSION_SIZE:
            session = Session.create(id=random_uuid(self.rng), owner=owner, at=at,
                                     name=f"Generation {self.seeded.sessions + 1}", kind="generation")
            history.session_id, history.in_session = session.id, 0
            self.seeded.session_of[owner] = session.id
            self.seeded.sessions += 1
            yield from session.collect_events()
        history.in_session += 1

    def store(self, owner: str, at: datetime, parent: Artifact | None, query: str, refinement: str | None) -> Artifact:
        rng = self.rng
        layout, draft, nodes = rng.choice(self.seeded.layouts)
        generated = parent is not None or rng.random() >= STORED_SHARE
        examples = [RagExample(id=f"example-{n:05d}", score=round(rng.random(), 4))
                    for n in rng.sample(range(RAG_POOL), rng.randint(0, 3))]
        session_id = self.histories[owner].session_id
        assert session_id is not None, "session() opens one before each artifact"
        artifact = Artifact.store(
            id=random_uuid(rng), owner=owner, at=at, session_id=session_id, parent=parent,
            layout=layout, query=query, draft=draft,
            model="offline-layout-1" if generated else None, provider="offline" if generated else None,
            temperature=round(rng.uniform(0.3, 1.0), 2) if generated else None,
            stats=GenerationStats(tokens=len(query.split()) + nodes, duration_ms=round(rng.uniform(50, 3000), 1)),
            rag_examples=examples, tags=self.corpus.tags(),
            origin=("refined" if parent is not None else "generated") if generated else "stored",
            refinement=refinement,
        )
        self.histories[owner].recent.append(artifact)
        self.seeded.artifacts += 1
        return artifact

    def artifact(self, owner: str, at: datetime) -> Iterator[Any]:
        yield from self.session(owner, at)
        recent = self.histories[owner].recent
        if recent and self.rng.random() < REFINED_SHARE:
            parent = self.rng.choice(recent)
            artifact = self.store(owner, at, parent, parent.query, self.corpus.text(self.rng.randint(3, 8))[0])
            self.seeded.refinements += 1
        else:
            query, rare = query_text(self.corpus, self.rng)
            kept = self.seeded.rare_words.setdefault(owner, [])
            kept.extend(rare[: RARE_WORDS_KEPT - len(kept)])
            artifact = self.store(owner, at, None, query, None)
        self.sample(artifact)
        yield from artifact.collect_events()

    def sample(self, artifact: Artifact) -> None:
        """Keep SAMPLED of the artifacts, every one as likely (reservoir sampling)."""
        entry, seen = (artifact.id, artifact.owner), self.seeded.artifacts - len(self.seeded.chain)
        if len(self.seeded.sample) < SAMPLED:
            self.seeded.sample.append(entry)
        elif (slot := self.rng.randrange(seen)) < SAMPLED:
            self.seeded.sample[slot] = entry

    def chain_link(self, at: datetime) -> Iterator[Any]:
        yield from self.session(CHAIN_OWNER, at)
        recent = self.histories[CHAIN_OWNER].recent
        parent = recent[-1] if recent else None
        query = parent.query if parent is not None else "Landing page for the long refinement chain"
        artifact = self.store(CHAIN_OWNER, at, parent, query, f"step {len(self.seeded.chain)}" if parent else None)
        self.seeded.chain.append(artifact.id)
        yield from artifact.collect_events()


def stored_batches(events: Iterator[Any], mapper: PydanticMapper, max_events: int) -> Iterator[list[StoredEvent]]:
    """The events mapped (and sealed for their owners), in batches of at most `max_events`
    events and about MAX_INSERT_BYTES."""
    batch: list[StoredEvent] = []
    size = 0
    for event in events:
        batch.append(stored := mapper.to_stored_event(event, event.owner))
        size += len(stored.state)
        if len(batch) >= max_events or size >= MAX_INSERT_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def seed(target: PostgresTarget, plan: Plan, progress: Callable[[Seeded], None]) -> Seeded:
    """Insert every event, one thread building batches while another inserts the last one."""
    seeded = Seeded(users=[f"bench-user-{n:05d}" for n in range(plan.users)])
    history = ArtifactHistory(plan, seeded)
    started = time.perf_counter()

    def inserted(events: int) -> None:
        seeded.events += events
        progress(seeded)

    insert_all(target, lambda store: stored_batches(history.events(), store.mapper, plan.batch_size), inserted)
    seeded.seconds = time.perf_counter() - started
    return seeded


class WrongReply(Exception):
    """A reply that came back but is not what was asked for: the run's numbers are void."""


class Measurements:
    """The requests measured, each by its owner's client, over one NATS connection."""

    def __init__(
        self, nc: NATS, service: ServiceProcess, plan: Plan, seeded: Seeded, report: Report, semantic: bool = False
    ):
        self.nc, self.service, self.plan, self.seeded, self.report = nc, service, plan, seeded, report
        self.semantic = semantic  # the service keeps the semantic read model: search is hybrid
        self.found_misspelt: list[bool] = []
        self.rng = random.Random(plan.seed + 3)
        self.corpus = Corpus(random.Random(plan.seed + 4))
        # Readers never write, so their queries never wait for a write of theirs to be applied.
        self.readers: dict[str, ChronicleClient] = {}
        self.writers: dict[str, ChronicleClient] = {}
        self.failures: dict[str, Any] = {}
        self.hits: dict[str, list[int]] = {kind: [] for kind in SEARCH_KINDS}  # items per search reply
        self.last_variations: tuple[str, UUID, UUID] | None = None  # (owner, set, first member)

    def client(self, clients: dict[str, ChronicleClient], user: str) -> ChronicleClient:
        if user not in clients:
            clients[user] = ChronicleClient(self.nc, self.service.token(user), prefix=self.service.subject_prefix,
                                            timeout=REQUEST_TIMEOUT)
        return clients[user]

    async def timed(self, name: str, count: int, operation: Callable[[], Awaitable[object]]) -> Samples:
        """`count` requests one at a time; the first failure of each kind is kept for the report."""
        async def noted() -> object:
            try:
                return await operation()
            except Exception as error:
                self.failures.setdefault(name, {"first": f"{type(error).__name__}: {error}", "count": 0})
                self.failures[name]["count"] += 1
                raise

        say(f"measuring {name}: {count:,} requests")
        samples = await sequential(name, noted, count=count, time_limit=self.plan.phase_time_limit,
                                   warmup=min(20, max(1, count // 10)))
        if samples.errors:
            say(f"  {samples.errors} failed: {self.failures[name]['first']}")
        return samples

    async def get(self) -> None:
        artifact_id, owner = self.rng.choice(self.seeded.sample)
        artifact = await self.client(self.readers, owner).artifacts.get(artifact_id)
        if artifact.id != artifact_id or not LAYOUT_NODES[0] <= artifact.node_count <= LAYOUT_NODES[1]:
            raise WrongReply(f"asked for {artifact_id}, got {artifact.id} of {artifact.node_count} nodes")

    async def ancestors(self) -> None:
        tip = self.seeded.chain[-1]
        reply = await self.client(self.readers, CHAIN_OWNER).artifacts.lineage(tip, direction="ancestors", depth=1_000)
        expected = self.seeded.chain[-2::-1]
        if [relative.id for relative in reply.ancestors] != expected[:1_000]:
            raise WrongReply(f"{len(reply.ancestors)} ancestors, expected {len(expected):,} back to the root")

    async def descendants(self) -> None:
        root = self.seeded.chain[0]
        reply = await self.client(self.readers, CHAIN_OWNER).artifacts.lineage(root, direction="descendants",
                                                                               depth=1_000)
        if [relative.id for relative in reply.descendants] != self.seeded.chain[1:1_001]:
            raise WrongReply(f"{len(reply.descendants)} descendants, expected {len(self.seeded.chain) - 1:,}")

    def search_words(self, kind: str, user: str) -> str:
        return search_words(self.rng, self.corpus, kind, self.seeded.rare_words.get(user))

    async def search(self, kind: str) -> None:
        user = self.rng.choice(self.seeded.users)
        words = self.search_words(kind, user)
        hits = await self.client(self.readers, user).artifacts.search(words)
        self.hits[kind].append(len(hits.items))
        # The user's rare words come from their own queries, so that search must find something.
        if hits.query != words or (kind == "rare word" and not hits.items and user in self.seeded.rare_words):
            raise WrongReply(f"{user}'s search for {words!r} found nothing")

    async def misspelt_search(self) -> None:
        """An artifact's own query, misspelt, searched for by its owner (its query is read
        first, untimed): full text misses it, the semantic half should not."""
        artifact_id, owner = self.rng.choice(self.seeded.sample)
        reader = self.client(self.readers, owner)
        query = (await reader.artifacts.get(artifact_id)).query
        words = misspelt(query, self.rng)
        started = time.perf_counter()
        hits = await reader.artifacts.search(words)
        self.misspelt_ms.append((time.perf_counter() - started) * 1000)
        self.found_misspelt.append(artifact_id in {h.artifact_id for h in hits.items})

    async def store(self) -> None:
        user = self.rng.choice(self.seeded.users)
        layout, draft, _ = self.rng.choice(self.seeded.layouts)
        session_id = self.seeded.session_of[user]
        reply = await self.client(self.writers, user).artifacts.store(
            layout, draft=draft, query=query_text(self.corpus, self.rng)[0], session_id=session_id)
        if reply.session_id != session_id or reply.generation != 0:
            raise WrongReply(f"stored in {reply.session_id} at generation {reply.generation}")

    async def variations(self) -> UUID:
        user = self.rng.choice(self.seeded.users)
        session_id = self.seeded.session_of[user]
        made = await self.client(self.writers, user).artifacts.variations(
            query_text(self.corpus, self.rng)[0], count=VARIATIONS, session_id=session_id)
        stored = [m.artifact_id for m in made.members if m.status == "stored" and m.artifact_id is not None]
        if len(stored) != VARIATIONS or made.session_id != session_id:
            raise WrongReply(f"{len(stored)} of {VARIATIONS} variations stored: {made.members}")
        self.last_variations = (user, made.variation_set_id, stored[0])
        return made.variation_set_id

    async def check_written(self) -> None:
        """The last variation set and its first member, read back: the read models apply new writes."""
        assert self.last_variations is not None, "no variation set was stored"
        user, set_id, member = self.last_variations
        writer = self.client(self.writers, user)  # reads its own writes: waits for their position
        found = await writer.artifacts.variation_set(set_id)
        artifact = await writer.artifacts.get(member)
        if len(found.members) != VARIATIONS or artifact.variation_set_id != set_id:
            raise WrongReply(f"variation set {set_id} reads back wrong")

    async def run(self) -> None:
        plan, report = self.plan, self.report
        samples = await self.timed("artifacts.get", plan.get_requests, self.get)
        report.add_percentiles("artifacts.get", samples.latencies_ms, aim_p95=under(GET_AIM_MS),
                               note=f"random artifacts of {plan.users:,} users; old design < 100 ms")
        chain = len(self.seeded.chain)
        for name, operation, label in (("lineage ancestors", self.ancestors, "tip"),
                                       ("lineage descendants", self.descendants, "root")):
            samples = await self.timed(f"artifacts.{name}", plan.lineage_requests, operation)
            report.add_percentiles(f"artifacts.{name}", samples.latencies_ms,
                                   note=f"{label} of a {chain:,}-long chain, depth 1,000: {chain - 1:,} returned")

        per_kind = max(plan.search_requests // len(SEARCH_KINDS), 1)
        searches = [await self.timed(f"artifacts.search ({kind})", per_kind, partial(self.search, kind))
                    for kind in SEARCH_KINDS]
        report.add_percentiles("artifacts.search", [ms for s in searches for ms in s.latencies_ms],
                               note=f"{len(SEARCH_KINDS)} kinds of query, {per_kind} each")
        for kind, kind_samples in zip(SEARCH_KINDS, searches, strict=True):
            found = self.hits[kind]
            report.add(f"  search {kind} p95", percentile(kind_samples.latencies_ms, 95), "ms",
                       note=f"{sum(found) / max(len(found), 1):.1f} hits a reply, of at most 20")

        if self.semantic:
            self.misspelt_ms: list[float] = []
            await self.timed("artifacts.search (misspelt query)", plan.search_requests, self.misspelt_search)
            report.add_percentiles("artifacts.search, misspelt (hybrid)", self.misspelt_ms,
                                   note="an artifact's own query with a typo in each long word, by its owner")
            recall = sum(self.found_misspelt) / max(len(self.found_misspelt), 1)
            report.add("  misspelt query: its artifact among the hits", recall * 100, "%",
                       aim=over(SEMANTIC_RECALL_AIM), note="full text alone finds almost none of them")
        samples = await self.timed("artifacts.store", plan.store_requests, self.store)
        report.add_percentiles("artifacts.store", samples.latencies_ms, note="one in flight, no parent")
        samples = await self.timed("artifact.variations", plan.variation_requests, self.variations)
        report.add_percentiles(f"artifact.variations, count {VARIATIONS}", samples.latencies_ms,
                               aim_p95=under(VARIATIONS_AIM_MS), note="offline generator; old design < 5 s")
        if self.last_variations is not None:
            await self.check_written()
        failed = sum(f["count"] for f in self.failures.values())
        report.add("failed or wrong replies", failed, aim=under(1))
        report.details["failures"] = self.failures


def seed_artifacts(target: PostgresTarget, plan: Plan, report: Report) -> Seeded:
    say(f"seeding {plan.artifacts:,} artifacts of {plan.users:,} users and a {plan.chain:,}-long chain")
    every = Every(10)

    def progress(seeded: Seeded) -> None:
        if every.due():
            say(f"  seeded {seeded.artifacts:,} / {plan.artifacts:,} artifacts")

    seeded = seed(target, plan, progress)
    say(f"seeded {seeded.events:,} events in {seeded.seconds:.1f} s")
    report.add("seed: events inserted directly", seeded.events / seeded.seconds, "events/s",
               note=f"{seeded.artifacts:,} artifacts, {seeded.sessions:,} sessions in {seeded.seconds:.1f} s")
    report.details["dataset"] = {
        "events": seeded.events, "artifacts": seeded.artifacts, "sessions": seeded.sessions,
        "refinements": seeded.refinements, "chain": len(seeded.chain), "users": len(seeded.users) + 1,
    }
    return seeded


def misspelt(query: str, rng: random.Random) -> str:
    """The query with one typo (two neighbouring letters swapped) in every word of 5 letters or more."""
    words = []
    for word in query.split():
        if len(word) >= 5:
            at = rng.randrange(1, len(word) - 2)
            word = word[:at] + word[at + 1] + word[at] + word[at + 2 :]
        words.append(word)
    return " ".join(words)


def keeps_semantic(target: PostgresTarget) -> bool:
    """Whether the service will keep the semantic read model here (the server has pgvector)."""
    with target.connect(autocommit=True) as conn:
        return semantic_support(conn) is None


def table_sizes(target: PostgresTarget) -> dict[str, int]:
    with target.connect(autocommit=True) as conn:
        rows = conn.execute(
            "SELECT n.nspname || '.' || c.relname, pg_total_relation_size(c.oid) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'r'"
            " AND (n.nspname, c.relname) IN (('chronicle', 'events'), ('rm_artifacts', 'artifacts'),"
            " ('rm_lineage', 'artifacts'), ('rm_lineage', 'rag_links'), ('rm_search', 'artifacts'),"
            " ('rm_semantic', 'artifacts'))"
        ).fetchall()
    return {name: size for name, size in rows}


def run(plan: Plan) -> tuple[Report, Path]:
    if not 0 < plan.chain < plan.artifacts or plan.users < 1:
        raise SystemExit("need 0 < --chain < --artifacts and --users >= 1")
    started = time.perf_counter()
    report = Report({"suite": "artifacts", **asdict(plan)})
    with bench_servers(plan.database_url, plan.nats_url, embedded_postgres=plan.embedded_postgres) as servers, \
            servers.fresh_database(plan.keep) as url, \
            tempfile.TemporaryDirectory(prefix="chronicle-bench-artifacts-") as workdir:
        report.details["server_settings"] = servers.server_settings()
        target = PostgresTarget(url)
        migrate(target)
        seeded = seed_artifacts(target, plan, report)
        semantic = keeps_semantic(target) and plan.service_settings.get("CHRONICLE_EMBEDDER") != "none"
        report.details["search"] = "hybrid (full text + semantic)" if semantic else "full text (no pgvector here)"
        with ServiceProcess.fresh(url, servers.nats_url, Path(workdir), plan.service_settings).stopped_afterwards(
            say
        ) as service:
            build_read_models(service, target, report, plan.build_timeout,
                              READ_MODELS + (["semantic"] if semantic else []))
            report.details["table_bytes"] = table_sizes(target)

            async def measure() -> None:
                nc = await connect(servers.nats_url)
                try:
                    await Measurements(nc, service, plan, seeded, report, semantic).run()
                finally:
                    await nc.drain()

            asyncio.run(measure())
        if plan.keep:
            say(f"kept database: {url}")
    report.details["total_seconds"] = round(time.perf_counter() - started, 1)
    return report, report.save()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench artifacts", description=__doc__.splitlines()[0])
    defaults = Plan()
    p.add_argument("--quick", action="store_true", help=f"a smoke-test scale (under a minute): {QUICK}")
    p.add_argument("--artifacts", type=int, help=f"artifacts seeded, the chain's included (default {defaults.artifacts:,})")
    p.add_argument("--users", type=int, help=f"users owning them (default {defaults.users:,})")
    p.add_argument("--chain", type=int, help=f"length of one user's line of refinements (default {defaults.chain:,})")
    p.add_argument("--requests", type=int,
                   help="measured requests of every kind (default: 500 get, 200 search, 50 lineage each way, "
                        "50 variation sets, 200 store)")
    p.add_argument("--seed", type=int, default=defaults.seed, help="random seed: the same seed seeds the same store")
    p.add_argument("--batch-size", type=int, default=defaults.batch_size,
                   help=f"events per seeding transaction at most (default {defaults.batch_size:,}); "
                        f"a transaction also closes at {MAX_INSERT_BYTES // 2**20} MiB")
    p.add_argument("--build-timeout", type=float, default=defaults.build_timeout,
                   help=f"seconds to wait for the read models' initial build (default {defaults.build_timeout:,.0f})")
    add_server_options(p)
    p.add_argument("--embedded-postgres", action="store_true",
                   help="an embedded Postgres even where one answers locally: it has pgvector, so search is "
                        "hybrid and the misspelt-query phase runs")
    p.add_argument("--keep", action="store_true",
                   help="keep the bench database afterwards (for EXPLAIN ANALYZE); its URL is printed")
    add_service_setting_option(p)
    args = p.parse_args(argv)
    given = {name: value for name, value in vars(args).items() if name in asdict(defaults) and value is not None}
    plan = replace(defaults, **{**(QUICK if args.quick else {}), **given},
                   service_settings=service_settings(args.service_setting))
    if args.requests is not None:
        plan = replace(plan, **dict.fromkeys(REQUESTS, args.requests))
    started = time.perf_counter()
    report, path = run(plan)
    print(report.table())
    print(f"\nsaved {path}; took {time.perf_counter() - started:.0f} s")
