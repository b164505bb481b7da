"""A user whose requests are refused by the thousand is put off the bus for a while.

A refused request costs the service a few microseconds (adapters/messaging/nats_service.py
refuses it in the subscription's callback), but a client keeping hundreds in flight keeps
that many queued on the service's connection ahead of everyone else's requests: another
user's request waits for all of them to be read and refused (./dev bench edges: p99 10 ms
beside 1 ms idle). Only the NATS server can drop such a flood without the service reading
it. So a user whose refusals pass `threshold` within `window` seconds is benched for
`cooldown` seconds: their connections are closed (the auth callout asks the server to
kick the connections it admitted for them, adapters/messaging/callout.py) and their
connects are refused until then, with the reason in the server's log.

Counted: the refusals of a caller whose token verified (over a budget or past their
requests at once, an invalid payload, a reply aimed outside their own inbox). Never a
refusal of a forged or expired header token: it names nobody, and a flood of those aimed
at another user's inbox must not put that user off the bus. Each instance counts alone:
the queue group spreads a flood over them all, so each sees its share and benches the
flooder itself (with N instances, at about N times the threshold in all).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Brake:
    threshold: int = 1000  # refusals within `window` that bench a user; 0: never
    window: float = 10.0  # seconds
    cooldown: float = 30.0  # seconds a benched user stays off the bus


class FloodBrake:
    """Counts each user's refusals (the service's event loop) and says who is benched (the
    auth callout's thread): one lock, a few dictionary operations per refusal."""

    def __init__(
        self, brake: Brake, *, clock: Callable[[], float] = time.monotonic, max_users: int = 100_000,
    ) -> None:
        self.brake = brake
        self.clock = clock
        self.max_users = max_users
        self.on_bench: Callable[[str], None] | None = None  # told each time a user is benched
        self._counts: OrderedDict[str, tuple[float, int]] = OrderedDict()  # user -> (window's start, refusals)
        self._benched: dict[str, float] = {}  # user -> until
        self._lock = threading.Lock()
        self.benched_users = 0  # how many times a user was benched

    def refused(self, user: str) -> None:
        """One of `user`'s requests was refused; past the threshold they are benched."""
        if self.brake.threshold <= 0:
            return
        now = self.clock()
        with self._lock:
            started, count = self._counts.pop(user, (now, 0))
            if now - started > self.brake.window:
                started, count = now, 0
            count += 1
            if count < self.brake.threshold:
                self._counts[user] = (started, count)
                while len(self._counts) > self.max_users:
                    self._counts.popitem(last=False)
                return
            self._benched[user] = now + self.brake.cooldown
            self._forget_served(now)
            self.benched_users += 1
        if self.on_bench is not None:
            self.on_bench(user)

    def benched_for(self, user: str) -> int:
        """Whole seconds left before `user` may connect again; 0: they may now."""
        with self._lock:
            until = self._benched.get(user)
            if until is None:
                return 0
            left = until - self.clock()
            if left <= 0:
                del self._benched[user]
                return 0
            return math.ceil(left)

    def _forget_served(self, now: float) -> None:
        """Benches whose cooldown ended (at most `max_users` kept: the earliest go first)."""
        for user, until in list(self._benched.items()):
            if until <= now:
                del self._benched[user]
        while len(self._benched) > self.max_users:
            del self._benched[min(self._benched, key=self._benched.__getitem__)]
