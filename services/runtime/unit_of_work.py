"""What one command sees while it runs: the caller, the clock, and the aggregates it touches."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import orjson

from domain.base import Aggregate
from domain.errors import NotFound

A = TypeVar("A", bound=Aggregate)


def footprint(aggregate: Aggregate) -> int:
    """About how many bytes an aggregate holds: its state as compact JSON (the content a
    user sent is most of it; Python's own overhead is not counted)."""
    return len(orjson.dumps(vars(aggregate), default=_plain, option=orjson.OPT_NON_STR_KEYS))


def _plain(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "__dict__"):
        return vars(value)
    return str(value)


class AggregateCache:
    """Least-recently-used aggregates, owned by the single writer thread, bounded both in
    number and in bytes (each aggregate's `footprint`): a few users' large aggregates
    (1 MB layouts, 64 KiB JSON fields) must not grow the service without bound. One larger
    than a quarter of the byte bound is not kept at all (it is loaded again when needed)."""

    def __init__(self, maxsize: int, max_bytes: int = 64 * 1024 * 1024):
        self.maxsize = maxsize
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[UUID, tuple[Aggregate, int]] = OrderedDict()

    def get(self, aggregate_id: UUID) -> Aggregate | None:
        found = self._items.get(aggregate_id)
        if found is None:
            return None
        self._items.move_to_end(aggregate_id)
        return found[0]

    def put(self, aggregate: Aggregate) -> None:
        self._drop(aggregate.id)
        size = footprint(aggregate)
        if self.maxsize <= 0 or size > self.max_bytes // 4:
            return
        self._items[aggregate.id] = (aggregate, size)
        self.bytes += size
        while len(self._items) > self.maxsize or self.bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self.bytes -= dropped

    def remeasure(self, aggregate_ids: object) -> None:
        """Count these cached aggregates at their size now (a command changed them)."""
        for aggregate_id in aggregate_ids:  # type: ignore[attr-defined]
            found = self._items.get(aggregate_id)
            if found is not None:
                self.put(found[0])

    def evict(self, aggregate_ids: object) -> None:
        for aggregate_id in aggregate_ids:  # type: ignore[attr-defined]
            self._drop(aggregate_id)

    def evict_owner(self, owner: str) -> None:
        for aggregate_id in [i for i, (a, _) in self._items.items() if a.owner == owner]:
            self._drop(aggregate_id)

    def _drop(self, aggregate_id: UUID) -> None:
        found = self._items.pop(aggregate_id, None)
        if found is not None:
            self.bytes -= found[1]

    def __contains__(self, aggregate_id: UUID) -> bool:
        return aggregate_id in self._items

    def __len__(self) -> int:
        return len(self._items)


class UnitOfWork:
    """Hands a command handler its aggregates; remembers which ones it touched."""

    def __init__(
        self,
        *,
        user_id: str,
        now: datetime,
        new_id: Callable[[], UUID],
        cache: AggregateCache,
        load: Callable[[list[UUID]], dict[UUID, Aggregate]],
        first_attempt: bool = True,
    ):
        self.user_id = user_id
        self.first_attempt = first_attempt
        self.now = now
        self.new_id = new_id
        self._cache = cache
        self._load = load
        self.touched: dict[UUID, Aggregate] = {}
        # What it handed out from the cache, and what it took to be new without a read:
        # another instance may have written them since (CommandBus._check_reads).
        self.from_cache: set[UUID] = set()
        self.guessed_new: set[UUID] = set()

    def get(self, kind: type[A], aggregate_id: UUID) -> A:
        """The caller's aggregate of this kind, or NotFound (missing, deleted, or not theirs)."""
        aggregate = self.find(kind, aggregate_id)
        if aggregate is None:
            raise NotFound(f"{kind.__name__.lower()} {aggregate_id} not found")
        aggregate.check_visible_to(self.user_id)
        return aggregate

    def find(self, kind: type[A], aggregate_id: UUID) -> A | None:
        """The aggregate of this kind with this id, whoever owns it, or None."""
        aggregate = self.touched.get(aggregate_id)
        if aggregate is None:
            aggregate = self._cache.get(aggregate_id)
            if aggregate is not None:
                self.from_cache.add(aggregate_id)
        if aggregate is None:
            aggregate = self._load([aggregate_id]).get(aggregate_id)
            if aggregate is not None:
                self._cache.put(aggregate)
        if not isinstance(aggregate, kind):
            return None
        self.touched[aggregate_id] = aggregate
        return aggregate

    def find_unless_new(self, kind: type[A], aggregate_id: UUID) -> A | None:
        """As `find`, except that on a command's first attempt an aggregate that is not
        cached is taken to be new, without reading the store. If it existed after all,
        saving its creation breaks the store's unique (id, version) and the command runs
        again, and then it is found: for ids that are almost always new (run ids)."""
        if self.first_attempt and aggregate_id not in self.touched and aggregate_id not in self._cache:
            self.guessed_new.add(aggregate_id)
            return None
        return self.find(kind, aggregate_id)

    def cached_reads(self) -> dict[UUID, int]:
        """{aggregate id: version} of what came from the cache and gets no new event (what
        gets one is checked by the store's unique version; what is written once is never
        behind), and 0 for what was taken to be new."""
        reads = {
            aggregate_id: aggregate.version
            for aggregate_id, aggregate in self.touched.items()
            if aggregate_id in self.from_cache and not aggregate.pending_events and not aggregate.WRITTEN_ONCE
        }
        return reads | dict.fromkeys(self.guessed_new - set(self.touched), 0)

    def forget_owner(self, owner: str) -> None:
        """Drop every cached aggregate of this owner (after an erasure)."""
        self._cache.evict_owner(owner)

    def add(self, aggregate: A) -> A:
        self.touched[aggregate.id] = aggregate
        self._cache.put(aggregate)
        return aggregate
