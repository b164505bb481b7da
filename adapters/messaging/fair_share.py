"""Per-user rate and concurrency limits at the NATS edge, before a request costs anything.

Each (user, budget) has a token bucket holding up to a minute's allowance and refilling
continuously; a request takes one token from each budget it draws on
(services/contract/limits.py) or is answered `rate_limited` with `retry_after` (seconds)
in its details, taking nothing. A user also has at most `in_flight` requests being
handled at once (a parked min_position wait counts), so one user cannot fill the
instance's own cap. Buckets live per instance: with N instances sharing the queue group
a user gets up to N times the allowance. The least recently seen users' buckets are
dropped past `max_users` (a dropped user starts again with a full bucket).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from adapters.metrics import Metrics
from services.contract.errors import ChronicleError
from services.contract.limits import BULK_ROLE, budgets_of


@dataclass(frozen=True)
class Limits:
    per_minute: Mapping[str, int]  # budget -> allowance a minute; 0 or absent: unlimited
    in_flight: int = 0  # per user; 0: unlimited
    bulk_factor: int = 100  # what a token with the bulk role gets, times the above


class FairShare:
    def __init__(
        self, limits: Limits, *, clock: Callable[[], float] = time.monotonic, max_users: int = 100_000,
        metrics: Metrics | None = None,
    ):
        self.limits = limits
        self.metrics = metrics
        self.clock = clock
        self.max_users = max_users
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float]] = OrderedDict()  # -> (tokens, at)
        self._in_flight: dict[str, int] = {}
        self.refused = 0

    def admit(self, user: str, action: str) -> None:
        """Take this request's tokens, or raise `rate_limited` (taking none)."""
        factor = self.limits.bulk_factor if BULK_ROLE in getattr(user, "roles", ()) else 1
        now = self.clock()
        taken: list[tuple[tuple[str, str], float]] = []
        for budget in budgets_of(action):
            allowance = self.limits.per_minute.get(budget, 0) * factor
            if allowance <= 0:
                continue
            key = (str(user), budget)
            tokens, at = self._buckets.pop(key, (float(allowance), now))
            tokens = min(float(allowance), tokens + (now - at) * allowance / 60.0)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                for earlier, before in taken:  # give back what this request took
                    self._buckets[earlier] = (before, now)
                self._refuse(budget)
                retry_after = math.ceil((1.0 - tokens) * 60.0 / allowance * 1000) / 1000
                raise rate_limited(f"at most {allowance} {budget} a minute", budget, retry_after)
            taken.append((key, tokens))
            self._buckets[key] = (tokens - 1.0, now)
        while len(self._buckets) > self.max_users:
            self._buckets.popitem(last=False)

    @contextlib.contextmanager
    def handling(self, user: str) -> Iterator[None]:
        """One of the user's requests being handled; `rate_limited` past `in_flight`."""
        limit = self.limits.in_flight * (self.limits.bulk_factor if BULK_ROLE in getattr(user, "roles", ()) else 1)
        key = str(user)
        count = self._in_flight.get(key, 0)
        if limit > 0 and count >= limit:
            self._refuse("in_flight")
            raise rate_limited(f"at most {limit} requests of yours at once", "in_flight", 0.1)
        self._in_flight[key] = count + 1
        try:
            yield
        finally:
            left = self._in_flight[key] - 1
            if left:
                self._in_flight[key] = left
            else:
                del self._in_flight[key]

    def _refuse(self, budget: str) -> None:
        self.refused += 1
        if self.metrics is not None:
            self.metrics.refused(budget)


def rate_limited(message: str, budget: str, retry_after: float) -> ChronicleError:
    return ChronicleError(
        "rate_limited", f"{message}; retry after {retry_after} s",
        [{"rule": budget, "retry_after": retry_after, "message": message}],
    )
