"""Load over NATS with the typed client: one-at-a-time latency per request kind, and sustained writes.

Every loop is bounded by a request count and a time limit. Reads use clients that never write,
so they measure the query itself and not a wait for read-your-writes.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import nats
from chronicle_client.connection import ChronicleClient
from chronicle_contract.base import Role
from nats.aio.client import Client as NATS

from adapters.auth import TokenAuthority
from bench.corpus import Corpus
from bench.seed import Dataset

Operation = Callable[[], Awaitable[object]]
SEARCH_KINDS = ("common word", "two common words", "rare word", "common and rare word")


def search_words(rng: random.Random, corpus: Corpus, kind: str, rare: list[str] | None) -> str:
    """Words for one of SEARCH_KINDS: common ones match a large share of a user's documents,
    `rare` are words the user's documents are known to hold."""
    rare = rare or [corpus.words[-1]]
    if kind == "common word":
        return rng.choice(corpus.common_words)
    if kind == "two common words":
        return " ".join(rng.sample(corpus.common_words, 2))
    if kind == "rare word":
        return rng.choice(rare)
    return f"{rng.choice(corpus.common_words)} {rng.choice(rare)}"
REQUEST_TIMEOUT = 30.0


@dataclass
class Samples:
    """Latencies (ms) of one request kind, how many failed, and the log positions written."""

    name: str
    in_flight: int = 1
    latencies_ms: list[float] = field(default_factory=list)
    writes: list[tuple[int, float]] = field(default_factory=list)  # (log position, reply time)
    errors: int = 0
    seconds: float = 0.0

    def add(self, started: float, result: object) -> None:
        now = time.perf_counter()
        self.latencies_ms.append((now - started) * 1000)
        if isinstance(result, int):
            self.writes.append((result, now))

    @property
    def throughput(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0


class Workload:
    """The requests a bench user makes, over one NATS connection, against the seeded history."""

    def __init__(self, nc: NATS, prefix: str, authority: TokenAuthority, dataset: Dataset, seed: int, active: int):
        self.dataset = dataset
        self.rng = random.Random(seed)
        self.corpus = Corpus(random.Random(seed + 1))
        self.readers = self._clients(nc, prefix, authority)
        self.writers = self._clients(nc, prefix, authority)
        long_ones = set(dataset.long_conversations)
        others = sorted((c for c in dataset.owner_of if c not in long_ones), key=str)
        # Writes go to a working set of conversations, as live chats touch a few at a time
        # (their aggregates get cached); the long ones stay at 100 messages for .get.
        self.active = self.rng.sample(others, min(active, len(others)))

    def _clients(self, nc: NATS, prefix: str, authority: TokenAuthority) -> dict[str, ChronicleClient]:
        return {
            user: ChronicleClient(nc, authority.issue(user), prefix=prefix, timeout=REQUEST_TIMEOUT)
            for user in self.dataset.users
        }

    def list_conversations(self) -> Awaitable[object]:
        return self.readers[self.rng.choice(self.dataset.users)].conversations.list()

    def get_long_conversation(self) -> Awaitable[object]:
        conversation_id = self.rng.choice(self.dataset.long_conversations)
        return self.readers[self.dataset.owner_of[conversation_id]].conversations.get(conversation_id)

    def search_words(self, kind: str, user: str) -> str:
        return search_words(self.rng, self.corpus, kind, self.dataset.rare_words.get(user))

    def search(self, kind: str) -> Awaitable[object]:
        """A random user's search of one of SEARCH_KINDS."""
        user = self.rng.choice(self.dataset.users)
        return self.readers[user].conversations.search(self.search_words(kind, user))

    async def add_message(self) -> int:
        """Add a message to an active conversation; returns the log position of the write."""
        conversation_id = self.rng.choice(self.active)
        role: Role = self.rng.choice(("user", "agent"))
        writer = self.writers[self.dataset.owner_of[conversation_id]]
        reply = await writer.conversations.add_message(conversation_id, role, self.corpus.message(role)[0])
        assert reply.position is not None
        return reply.position


async def connect(url: str) -> NATS:
    return await nats.connect(url, name=f"chronicle-bench-{uuid.uuid4().hex[:6]}", max_reconnect_attempts=3)


async def sequential(
    name: str, operation: Operation, *, count: int, time_limit: float, warmup: int = 20
) -> Samples:
    """`count` requests, one in flight, after `warmup` unmeasured ones; stops early at `time_limit`."""
    for _ in range(warmup):
        await operation()
    samples = Samples(name)
    began = time.perf_counter()
    deadline = began + time_limit
    while len(samples.latencies_ms) + samples.errors < count and time.perf_counter() < deadline:
        await timed_call(samples, operation)
    samples.seconds = time.perf_counter() - began
    return samples


async def timed_call(samples: Samples, operation: Operation) -> None:
    """One request, its latency recorded, or an error counted."""
    started = time.perf_counter()
    try:
        result = await operation()
    except Exception:
        samples.errors += 1
        return
    samples.add(started, result)


async def sustained(
    name: str, operation: Operation, *, concurrency: int, duration: float, max_requests: int
) -> Samples:
    """`concurrency` callers back to back for `duration` seconds (at most `max_requests` in all)."""
    samples = Samples(name, in_flight=concurrency)
    issued = 0
    began = time.perf_counter()
    deadline = began + duration

    async def caller() -> None:
        nonlocal issued
        while issued < max_requests and time.perf_counter() < deadline:
            issued += 1
            await timed_call(samples, operation)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    samples.seconds = time.perf_counter() - began
    return samples
