"""Seeds a large history straight into the event store, without NATS or the command bus.

Events come from the real Conversation aggregate (so they are exactly what the service would
record), with deterministic ids and timestamps, are mapped by the service's PydanticMapper, and
are inserted by the event store's recorder in large transactions. Conversations are generated in
chunks whose events are interleaved by time, as a live log would hold them. One thread builds
events while another inserts the previous batch.
"""

from __future__ import annotations

import random
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from pathlib import Path
from typing import Any

from eventsourcing.domain import CanMutateAggregate
from eventsourcing.persistence import StoredEvent

from adapters.store.event_store import EventStore
from adapters.store.kek import KekDirectory
from adapters.store.kek_rotation import attached
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from bench.corpus import Corpus
from domain.conversation import Conversation, Role

EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
HISTORY_SPAN = timedelta(days=300)  # seeded conversations start within this span after EPOCH
CHUNK_CONVERSATIONS = 500  # conversations whose events are interleaved by time
LONG_CONVERSATION = 100  # messages in the conversations conversations.get is measured on
LONG_SHARE = 10  # one conversation in this many is a long one, when the budget allows
TITLED_SHARE = 0.6  # the rest take their title from their first user message (a Retitled event)
RARE_WORDS_KEPT = 20  # per user, for rare-word searches that find something
INSERTS_IN_FLIGHT = 2


@dataclass(frozen=True)
class Scale:
    users: int
    conversations: int
    messages: int

    def check(self) -> None:
        if not 0 < self.users <= self.conversations <= self.messages:
            raise ValueError("need 0 < users <= conversations <= messages")


@dataclass
class Dataset:
    """What the load phases need to know about the seeded history."""

    users: list[str]
    owner_of: dict[uuid.UUID, str] = field(default_factory=dict)
    long_conversations: list[uuid.UUID] = field(default_factory=list)
    rare_words: dict[str, list[str]] = field(default_factory=dict)
    events: int = 0
    messages: int = 0
    seconds: float = 0.0

    @property
    def events_per_second(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def random_uuid(rng: random.Random) -> uuid.UUID:
    return uuid.UUID(int=rng.getrandbits(128), version=4)


def message_counts(scale: Scale, rng: random.Random) -> list[int]:
    """Messages per conversation, summing to `scale.messages`; some exactly LONG_CONVERSATION.

    The long ones are picked at random so they spread over all users; the others get a skewed
    share of what is left (at least one message each, and never exactly LONG_CONVERSATION).
    """
    # At most half of the messages beyond one per conversation go to the long ones.
    spare = scale.messages - scale.conversations
    long_count = min(scale.conversations // LONG_SHARE, spare // (2 * LONG_CONVERSATION))
    long_ids = set(rng.sample(range(scale.conversations), max(long_count, 0)))
    others = [i for i in range(scale.conversations) if i not in long_ids]
    budget = scale.messages - LONG_CONVERSATION * len(long_ids)
    weights = [rng.expovariate(1.0) + 0.1 for _ in others]
    total_weight = sum(weights)
    counts = [0] * scale.conversations
    for i in long_ids:
        counts[i] = LONG_CONVERSATION
    for i, weight in zip(others, weights, strict=True):
        count = max(1, int(budget * weight / total_weight))
        counts[i] = count - 1 if count == LONG_CONVERSATION else count
    surplus = budget - sum(counts[i] for i in others)
    while surplus != 0:  # settle the rounding one message at a time
        i = rng.choice(others)
        step = 1 if surplus > 0 else -1
        if counts[i] + step >= 1 and counts[i] + step != LONG_CONVERSATION:
            counts[i] += step
            surplus -= step
    return counts


def conversation_events(
    corpus: Corpus, rng: random.Random, owner: str, started_at: datetime, message_count: int, rare: list[str]
) -> tuple[uuid.UUID, Sequence[CanMutateAggregate[uuid.UUID]]]:
    """One conversation's events, made by the domain aggregate; rare words used go into `rare`."""
    title = corpus.title() if rng.random() < TITLED_SHARE else None
    conversation = Conversation.start(
        id=random_uuid(rng), owner=owner, at=started_at, title=title, tags=corpus.tags()
    )
    at = started_at
    for index in range(message_count):
        at += timedelta(seconds=rng.uniform(5, 600))
        role: Role = "user" if index % 2 == 0 else "agent"
        content, rare_used = corpus.message(role)
        if len(rare) < RARE_WORDS_KEPT:
            rare.extend(rare_used[: RARE_WORDS_KEPT - len(rare)])
        metadata = {"model": "bench-llm", "tokens": len(content) // 4} if role == "agent" else {}
        conversation.add_message(
            message_id=random_uuid(rng), at=at, role=role, content=content, metadata=metadata,
            pinned=rng.random() < 0.01,
        )
    return conversation.id, conversation.collect_events()


def generate(scale: Scale, seed: int, dataset: Dataset) -> Iterator[Any]:
    """Every seeded domain event in log order, filling in `dataset` as it goes."""
    rng = random.Random(seed)
    corpus = Corpus(random.Random(seed + 1))
    counts = message_counts(scale, rng)
    spacing = HISTORY_SPAN / scale.conversations
    for chunk_start in range(0, scale.conversations, CHUNK_CONVERSATIONS):
        chunk: list[Any] = []
        for index in range(chunk_start, min(chunk_start + CHUNK_CONVERSATIONS, scale.conversations)):
            owner = dataset.users[index % scale.users]
            started_at = EPOCH + spacing * index + timedelta(seconds=rng.uniform(0, 3600))
            rare = dataset.rare_words.setdefault(owner, [])
            conversation_id, events = conversation_events(corpus, rng, owner, started_at, counts[index], rare)
            dataset.owner_of[conversation_id] = owner
            if counts[index] == LONG_CONVERSATION:
                dataset.long_conversations.append(conversation_id)
            dataset.messages += counts[index]
            chunk.extend(events)
        chunk.sort(key=attrgetter("timestamp"))  # stable: one stream's events keep their order
        yield from chunk


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def key_ring(target: PostgresTarget) -> KeyRing:
    """A key ring for a fresh bench database, its key-encryption key attached as the service
    attaches one on first start (in a folder of its own under the system's temporary folder)."""
    return KeyRing(target, attached(target, KekDirectory(Path(tempfile.mkdtemp(prefix="chronicle-seed-kek-")))))


def insert_all(
    target: PostgresTarget,
    batches: Callable[[EventStore], Iterable[list[StoredEvent]]],
    inserted: Callable[[int], None],
) -> None:
    """Insert each batch `batches(store)` yields in one transaction, sealed per owner as the
    service writes, one thread inserting while the caller builds the next batch."""
    keys = key_ring(target)
    store = EventStore(target, pool_size=1, keys=keys)
    in_flight: deque[Future[Any]] = deque()
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bench-insert") as inserter:
            for stored in batches(store):
                in_flight.append(inserter.submit(store.recorder.record, stored))
                while len(in_flight) >= INSERTS_IN_FLIGHT:
                    in_flight.popleft().result()
                inserted(len(stored))
            while in_flight:
                in_flight.popleft().result()
    finally:
        store.close()
        keys.close()


def seed(
    target: PostgresTarget,
    scale: Scale,
    *,
    seed: int = 1,
    batch_size: int = 5_000,
    progress: Callable[[int, int], None] = lambda done, total: None,
) -> Dataset:
    """Insert the whole history; returns what was seeded and how fast."""
    scale.check()
    dataset = Dataset(users=[f"bench-user-{i:04d}" for i in range(scale.users)])
    started = time.perf_counter()

    def sealed(store: EventStore) -> Iterator[list[StoredEvent]]:
        for batch in batched(generate(scale, seed, dataset), batch_size):
            yield [store.mapper.to_stored_event(e, dataset.owner_of[e.originator_id]) for e in batch]

    def inserted(events: int) -> None:
        dataset.events += events
        progress(dataset.messages, scale.messages)

    insert_all(target, sealed, inserted)
    dataset.seconds = time.perf_counter() - started
    return dataset
