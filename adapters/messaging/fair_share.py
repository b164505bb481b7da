"""Per-user rate and concurrency limits at the NATS edge, before a request costs anything.

Each (user, budget) has a token bucket holding up to a minute's allowance and refilling
continuously; a request takes one token from each budget it draws on
(clients/python/chronicle_contract/limits.py) or is answered `rate_limited` with `retry_after` (seconds)
in its details, taking nothing.

One budget per user across the fleet. Every instance keeps its own copy of each bucket,
so the request path makes no round trip, and reports what its users spent every
`report_every` seconds (`take_report`; adapters/messaging/usage_sync.py carries it over
NATS); what the other instances report is taken from its copies (`spent_elsewhere`), into
debt if need be (down to minus a minute's allowance), so what the fleet served beyond the
allowance is waited off afterwards. Until it reports, an instance cannot know what the
others served, so one that knows of `peers` others serves a request only while its copy
would still hold a token after each of them took as many as it did since its own last
report: `tokens >= 1 + peers * (unreported + 1)`. Requests the queue group spreads evenly
then get the allowance exactly; requests that land unevenly among staggered reports get
at most (N-1)/N of (the allowance plus one interval's refill) more, and wait it off. An instance started within the last interval, not yet heard of, can serve up to a
full bucket of its own before the others count it (docs/architecture.md, "Fair share").
Peers not heard from for `peer_ttl` seconds (NATS down, an instance killed) are not
counted: with none, the buckets are this instance's alone, as with a single instance
(fail open to per-instance limits, never closed for everyone).

A user also has at most `in_flight` requests being handled at once on each instance (a
parked min_position wait counts), so one user cannot fill the instance's own cap, and at
most `heavy_in_flight` of them heavy (pareto, lineage, by-example: the `heavy` budget),
so one user's heavy queries at once cannot take the instance's cores from everyone else
(a bulk token included: the bulk factor raises its budgets and requests at once, not this);
those counts are not shared. The least recently seen users' buckets are dropped past
`max_users` (a dropped user starts again with a full bucket).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from chronicle_contract.errors import ChronicleError
from chronicle_contract.limits import BULK_ROLE, budgets_of

from adapters.metrics import Metrics

Usage = tuple[str, str, int, int]  # (user, budget, allowance a minute, tokens spent)


@dataclass(frozen=True)
class Limits:
    per_minute: Mapping[str, int]  # budget -> allowance a minute; 0 or absent: unlimited
    in_flight: int = 0  # per user; 0: unlimited
    heavy_in_flight: int = 0  # per user, of those drawing on the `heavy` budget; 0: unlimited
    bulk_factor: int = 100  # what a token with the bulk role gets, times the above

    @property
    def rates_limited(self) -> bool:
        return any(allowance > 0 for allowance in self.per_minute.values())


class FairShare:
    def __init__(
        self,
        limits: Limits,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_users: int = 100_000,
        report_every: float = 0.0,
        peer_ttl: float | None = None,
        metrics: Metrics | None = None,
    ):
        self.limits = limits
        self.metrics = metrics
        self.clock = clock
        self.max_users = max_users
        self.report_every = report_every  # 0: this instance's buckets are its own (nothing reported)
        # Ten reports missed: the peer is gone (or we are cut off) and no longer counted.
        self.peer_ttl = peer_ttl if peer_ttl is not None else max(1.0, 10 * report_every)
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()  # -> (tokens, at)
        self._unreported: dict[tuple[str, str], tuple[int, int]] = {}  # -> (allowance, spent)
        self._peers: dict[str, float] = {}  # instance -> when last heard
        self._reported_at = clock()
        self._in_flight: dict[str, int] = {}
        self._heavy_in_flight: dict[str, int] = {}
        self.refused = 0

    def admit(self, user: str, action: str) -> None:
        """Take this request's tokens, or raise `rate_limited` (taking none)."""
        factor = self.limits.bulk_factor if BULK_ROLE in getattr(user, "roles", ()) else 1
        now = self.clock()
        peers = self.peers(now)
        taken: list[tuple[tuple[str, str], float]] = []
        for budget in budgets_of(action):
            allowance = self.limits.per_minute.get(budget, 0) * factor
            if allowance <= 0:
                continue
            key = (str(user), budget)
            tokens = self._refilled(key, allowance, now)
            unreported = self._unreported.get(key, (allowance, 0))[1]
            if tokens < 1.0 + peers * (unreported + 1):
                self._buckets[key] = (tokens, now)
                for earlier, before in taken:  # give back what this request took
                    self._buckets[earlier] = (before, now)
                    if earlier in self._unreported:
                        self._count(earlier, -1)
                self._refuse(budget)
                wait = self._retry_after(tokens, peers, unreported, allowance, now)
                raise rate_limited(f"at most {allowance} {budget} a minute", budget, wait)
            taken.append((key, tokens))
            self._buckets[key] = (tokens - 1.0, now)
            if self.report_every > 0:
                self._unreported[key] = (allowance, unreported + 1)
        self._trim()

    def take_report(self) -> list[Usage]:
        """What this instance's users spent since the last report, for the other instances."""
        report = [(user, budget, allowance, spent) for (user, budget), (allowance, spent) in self._unreported.items()]
        self._unreported = {}
        self._reported_at = self.clock()
        return report

    def spent_elsewhere(self, instance: str, usage: Iterable[Usage]) -> None:
        """Another instance's report: what its users spent comes off the same buckets here."""
        now = self.clock()
        self._peers[instance] = now
        for user, budget, allowance, spent in usage:
            if self.limits.per_minute.get(budget, 0) <= 0 or allowance <= 0:
                continue  # a budget this instance does not limit (another version's, or configured off)
            key = (user, budget)
            self._buckets[key] = (max(-float(allowance), self._refilled(key, allowance, now) - spent), now)
        self._trim()

    def left(self, instance: str) -> None:
        """An instance said it stops: no longer count it among the peers."""
        self._peers.pop(instance, None)

    def peers(self, now: float | None = None) -> int:
        """The other instances heard from within `peer_ttl`."""
        now = self.clock() if now is None else now
        for instance, heard in list(self._peers.items()):
            if now - heard > self.peer_ttl:
                del self._peers[instance]
        return len(self._peers)

    def _refilled(self, key: tuple[str, str], allowance: int, now: float) -> float:
        """The bucket's tokens now (taken out: the caller puts it back as most recently seen)."""
        tokens, at = self._buckets.pop(key, (float(allowance), now))
        return min(float(allowance), tokens + (now - at) * allowance / 60.0)

    def _count(self, key: tuple[str, str], spent: int) -> None:
        allowance, before = self._unreported[key]
        if before + spent:
            self._unreported[key] = (allowance, before + spent)
        else:
            del self._unreported[key]

    def _retry_after(self, tokens: float, peers: int, unreported: int, allowance: int, now: float) -> float:
        """Until the bucket holds enough for one request after this instance's next report,
        and, while it has unreported spending of this budget, until that report."""
        refill = max(0.0, 1.0 + peers - tokens) * 60.0 / allowance
        report = max(0.0, self._reported_at + self.report_every - now) if unreported else 0.0
        return math.ceil(max(refill, report, 0.001) * 1000) / 1000

    def _trim(self) -> None:
        while len(self._buckets) > self.max_users:
            self._buckets.popitem(last=False)

    @contextlib.contextmanager
    def handling(self, user: str, action: str = "") -> Iterator[None]:
        """One of the user's requests being handled; `rate_limited` past `in_flight` (or,
        for a heavy one, past `heavy_in_flight`)."""
        self.enter(user, action)
        try:
            yield
        finally:
            self.leave(user, action)

    def enter(self, user: str, action: str = "") -> None:
        """One more of the user's requests in flight, or `rate_limited` past `in_flight`, or
        for a heavy action past `heavy_in_flight` (counting nothing); each `enter` that
        returns is followed by one `leave` with the same action."""
        factor = self.limits.bulk_factor if BULK_ROLE in getattr(user, "roles", ()) else 1
        key = str(user)
        limit = self.limits.in_flight * factor
        count = self._in_flight.get(key, 0)
        if limit > 0 and count >= limit:
            self._refuse("in_flight")
            raise rate_limited(f"at most {limit} requests of yours at once", "in_flight", 0.1)
        if is_heavy(action):
            # (not times the bulk factor: a heavy query at once is a core's work, and an
            # optimizer's token must not hold every core of the instance either)
            heavy_limit = self.limits.heavy_in_flight
            heavy = self._heavy_in_flight.get(key, 0)
            if heavy_limit > 0 and heavy >= heavy_limit:
                self._refuse("heavy_in_flight")
                raise rate_limited(f"at most {heavy_limit} heavy queries of yours at once", "heavy_in_flight", 0.5)
            self._heavy_in_flight[key] = heavy + 1
        self._in_flight[key] = count + 1

    def leave(self, user: str, action: str = "") -> None:
        key = str(user)
        counts = (self._in_flight, self._heavy_in_flight) if is_heavy(action) else (self._in_flight,)
        for count in counts:
            left = count[key] - 1
            if left:
                count[key] = left
            else:
                del count[key]

    def _refuse(self, budget: str) -> None:
        self.refused += 1
        if self.metrics is not None:
            self.metrics.refused(budget)


def is_heavy(action: str) -> bool:
    return "heavy" in budgets_of(action)


def rate_limited(message: str, budget: str, retry_after: float) -> ChronicleError:
    return ChronicleError(
        "rate_limited", f"{message}; retry after {retry_after} s",
        [{"rule": budget, "retry_after": retry_after, "message": message}],
    )
