"""Fail fast while Postgres is unreachable, and work again the moment it is back.

A call that cannot reach Postgres is tried again only while a bare connection attempt
(a probe) says the server answers (a pooled connection it dropped, say), and never past
`within` seconds; then Postgres counts as down, and each call first probes (one probe at a
time: a refused connection costs well under a millisecond, an unanswered one at most
PROBE_TIMEOUT) and fails at once if it is still down. The first probe that connects counts
it up, so the first call after Postgres is back goes through: no backoff at all.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError

T = TypeVar("T")
P = ParamSpec("P")

RECONNECT_TIMEOUT = 0.5  # a pool's reconnection attempts give up this soon: the next request starts one afresh
RECONNECT_WAIT_MAX = 0.5  # seconds a listener or relay waits at most before it connects again
PROBE_TIMEOUT = 2  # seconds a probe may take to connect (libpq's minimum)
RETRY_WAIT = 0.02  # seconds between the tries of one call


class Unreachable(OperationalError):
    """Postgres did not answer; the call was not made (or not completed)."""


class Reachability:
    def __init__(
        self,
        url: str,
        within: float,
        *,
        is_statement_failure: Callable[[Exception], bool],
        connect: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url = url
        self.within = within
        self.is_statement_failure = is_statement_failure
        self.down = False
        self._connect = connect or (lambda: psycopg.connect(url, connect_timeout=PROBE_TIMEOUT))
        self._clock = clock
        self._probing = threading.Lock()  # one probe at a time
        self._unanswered_until = 0.0  # a probe that waited out its timeout is not repeated before this

    def run(self, call: Callable[[], T]) -> T:
        """`call()`, tried again while Postgres answers and time is left; Unreachable (or
        the call's own error) when it does not."""
        if self.down and not self.answers():
            raise Unreachable("the database is unreachable")
        deadline = time.monotonic() + self.within
        while True:
            try:
                result = call()
            except (InterfaceError, OperationalError) as error:
                if self.is_statement_failure(error):
                    raise
                if time.monotonic() + RETRY_WAIT >= deadline or not self.answers():
                    self.down = True
                    raise
                time.sleep(RETRY_WAIT)
            else:
                self.down = False
                return result

    def answers(self) -> bool:
        """Whether a fresh connection to Postgres succeeds now. A refusal is known at once,
        so every caller asks again; a server that does not answer at all costs a probe its
        whole timeout, so for as long again the callers queued behind it take that answer
        instead of waiting their own turn at it."""
        with self._probing:
            started = self._clock()
            if started < self._unanswered_until:
                return False
            try:
                self._connect().close()
            except psycopg.Error:
                waited = self._clock() - started
                if waited >= PROBE_TIMEOUT / 2:
                    self._unanswered_until = self._clock() + waited
                return False
            self.down = False
            return True


async def answers_off_loop(reachability: Reachability | None) -> bool:
    """`reachability.answers()` for async callers, in a worker thread (True without one)."""
    return reachability is None or await asyncio.to_thread(reachability.answers)


class Guarded(Protocol):
    reachability: Reachability


G = TypeVar("G", bound=Guarded)


def while_reachable(method: Callable[Concatenate[G, P], T]) -> Callable[Concatenate[G, P], T]:
    """A recorder's method run through its `reachability`."""

    @functools.wraps(method)
    def run(self: G, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.reachability.run(lambda: method(self, *args, **kwargs))

    return run


def fail_fast(pool: Any, within: float) -> None:
    """A psycopg pool that waits at most `within` seconds for a connection, gives each
    connection attempt the least libpq allows, and retries a lost server without a long
    backoff (psycopg_pool's default backs off for up to 5 minutes)."""
    pool.timeout = within
    pool.reconnect_timeout = RECONNECT_TIMEOUT
    pool.kwargs = {**pool.kwargs, "connect_timeout": PROBE_TIMEOUT}
