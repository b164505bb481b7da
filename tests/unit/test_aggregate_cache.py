"""The command bus's aggregate cache: least recently used first out, bounded in number and in bytes."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from domain.session import Session
from services.runtime.unit_of_work import AggregateCache, footprint


def session(sent: str = "") -> Session:
    return Session.create(id=uuid.uuid4(), owner="u", at=datetime.now(UTC), name="s", metadata={"sent": sent})


def test_the_footprint_counts_what_a_user_sent() -> None:
    assert footprint(session("x" * 50_000)) - footprint(session()) >= 50_000


def test_past_its_bytes_the_least_recently_used_go_first() -> None:
    big = [session("x" * 10_000) for _ in range(5)]
    cache = AggregateCache(maxsize=1_000, max_bytes=4 * footprint(big[0]) + 100)
    for aggregate in big[:4]:
        cache.put(aggregate)
    assert cache.get(big[0].id) is big[0]  # now the most recently used
    cache.put(big[4])
    assert big[1].id not in cache and all(a.id in cache for a in (big[0], big[2], big[3], big[4]))
    assert cache.bytes == sum(footprint(a) for a in (big[0], big[2], big[3], big[4])) <= cache.max_bytes


def test_one_larger_than_a_quarter_of_the_bound_is_not_kept() -> None:
    cache = AggregateCache(maxsize=1_000, max_bytes=100_000)
    small, huge = session("x" * 1_000), session("x" * 30_000)
    cache.put(small)
    cache.put(huge)
    assert small.id in cache and huge.id not in cache and cache.bytes == footprint(small)


def test_a_cached_aggregate_that_grew_is_counted_again() -> None:
    grown = session()
    cache = AggregateCache(maxsize=1_000, max_bytes=10_000_000)
    cache.put(grown)
    before = cache.bytes
    grown.update(at=datetime.now(UTC), description="y" * 9_000)
    cache.remeasure([grown.id])
    assert cache.bytes - before >= 9_000 and len(cache) == 1


def test_evicting_gives_its_bytes_back_and_the_count_bound_still_holds() -> None:
    cache = AggregateCache(maxsize=2, max_bytes=10_000_000)
    first, second, third = session(), session(), session()
    for aggregate in (first, second, third):
        cache.put(aggregate)
    assert len(cache) == 2 and first.id not in cache
    cache.evict([second.id, third.id])
    assert len(cache) == 0 and cache.bytes == 0
