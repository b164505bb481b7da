"""Fail fast while Postgres is unreachable, and work again the moment it is back.

A call that cannot reach Postgres is tried again only while a bare connection attempt
(a probe, adapters/store/probe.py) says the server answers (a pooled connection it
dropped, say), and never past `within` seconds; then Postgres counts as down, and each
call first probes (one probe at a time: a refused connection costs well under a
millisecond, an unanswered one at most PROBE_TIMEOUT) and fails at once if it is still
down. The first probe that connects counts it up, so the first call after Postgres is back
goes through: no backoff at all.

A server that takes a statement and then says nothing (a frozen host, a route that drops
packets) would hold its caller for ever, and the writer thread with it: a connection in
use for longer than `within` minus two probes' time is asked after (`guarding`), and if
the server answers the probe with nothing, its socket is shut, so the statement fails at once.
(What the server had already taken may still run when it wakes: `unavailable` then means
"not known to be written", as any timeout does; a command's Idempotency-Key makes sending
it again safe.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError

from adapters.store.probe import NoAnswer, knock

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

RECONNECT_TIMEOUT = 0.5  # a pool's reconnection attempts give up this soon: the next request starts one afresh
RECONNECT_WAIT_MAX = 0.5  # seconds a listener or relay waits at most before it connects again
CONNECT_TIMEOUT = 2  # seconds a libpq connection attempt may take (libpq's minimum)
PROBE_TIMEOUT = 0.5  # seconds a probe waits for the server's first byte
ANSWERED_FOR = 0.25  # seconds an answered probe is believed
RETRY_WAIT = 0.02  # seconds between the tries of one call
WATCHDOG_LOOK = 0.1  # seconds between the watchdog's looks at the connections held


class Unreachable(OperationalError):
    """Postgres did not answer; the call was not made (or not completed)."""


class Reachability:
    def __init__(
        self,
        url: str | Callable[[], str],  # or what tells it once the server is up
        within: float,
        *,
        is_statement_failure: Callable[[Exception], bool],
        connect: Callable[[], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.within = within
        self.is_statement_failure = is_statement_failure
        self.down = False
        self._connect = connect or (lambda: probe(url if isinstance(url, str) else url()))
        self._clock = clock
        self._probing = threading.Lock()  # one probe at a time
        self._unanswered_until = 0.0  # a probe that waited out its timeout is not repeated before this
        self._answered_until = 0.0  # nor one that was answered
        # Held this long, a connection's server is probed: the watchdog's look, the probe's
        # wait and as long again (for the failure to reach the caller) still fit in
        # `within`. One probe decides (a second would hold every caller behind the probe
        # lock as long again); a server it missed by a lost packet costs that statement
        # `unavailable`, which a keyed retry makes safe.
        self.watchdog = Watchdog(max(within - 2 * PROBE_TIMEOUT - WATCHDOG_LOOK, PROBE_TIMEOUT), self.answers)

    def guarding(self, conn: Any) -> contextlib.AbstractContextManager[None]:
        """While the block runs: the connection's socket is shut if the block outlasts
        `within` minus two probes' time and the server answers no probe (module docstring)."""
        return self.watchdog.guarding(conn)

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

    def answers(self, *, fresh: bool = False) -> bool:
        """Whether a fresh connection to Postgres succeeds now. A refusal is known at once,
        so every caller asks again; a server that does not answer at all costs a probe its
        whole timeout, so for as long again the callers queued behind it take that answer
        instead of waiting their own turn at it. An answer is believed for ANSWERED_FOR
        (many waiters asking at once cost the server one probe, not one each). `fresh`:
        probe whatever was heard before."""
        with self._probing:
            started = self._clock()
            if not fresh and started < self._unanswered_until:
                return False
            if not fresh and started < self._answered_until:
                return True
            try:
                self._connect().close()
            except (psycopg.Error, NoAnswer):
                waited = self._clock() - started
                if waited >= PROBE_TIMEOUT / 2:
                    self._unanswered_until = self._clock() + waited
                return False
            self.down = False
            self._answered_until = self._clock() + ANSWERED_FOR
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
    pool.kwargs = {**pool.kwargs, "connect_timeout": CONNECT_TIMEOUT}


class Answered:
    """What a probe that was answered gives back, closed like the connection it stands for."""

    def close(self) -> None:
        pass


def probe(url: str) -> Answered:
    knock(url, PROBE_TIMEOUT)
    return Answered()


class Watchdog:
    """Shuts the socket of a connection held past its deadline while its server answers
    no probe. One thread for all connections, started on first use. Taking a connection
    wakes nobody (a wake-up of that thread per read cost a one-at-a-time read ~50 µs of
    CPU): the thread looks every WATCHDOG_LOOK seconds, or at a deadline that comes first,
    so it sees a deadline at most that late."""

    def __init__(self, after: float, answers: Callable[[], bool]):
        self.after = after
        self.answers = answers
        self.severed = 0
        self._held: dict[int, list[Any]] = {}  # token -> [deadline, connection]
        self._tokens = itertools.count()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guarding(self, conn: Any) -> Iterator[None]:
        token = next(self._tokens)
        with self._lock:
            self._held[token] = [time.monotonic() + self.after, conn]
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="postgres-watchdog", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(token, None)

    def _watch(self) -> None:
        while True:
            try:
                self._look()
            except Exception:  # a bug in a look must not end the watching for good
                log.exception("postgres watchdog failed; watching on")
                time.sleep(self.after)

    def _look(self) -> None:
        """Wait for the next deadline; probe for those held past it; shut the silent ones."""
        with self._lock:
            now = time.monotonic()
            due = [(token, held[1]) for token, held in self._held.items() if held[0] <= now]
            wake_at = min((held[0] for held in self._held.values()), default=now + WATCHDOG_LOOK)
        if not due:
            time.sleep(min(wake_at - now, WATCHDOG_LOOK))
            return
        silent = not self.answers()  # (outside the lock: a probe may take PROBE_TIMEOUT)
        severed = 0
        with self._lock:
            for token, conn in due:
                if token not in self._held:
                    continue  # let go meanwhile
                if silent:
                    del self._held[token]
                    sever(conn)
                    severed += 1
                else:  # slow, not silent: the server answers; ask again later
                    self._held[token][0] = time.monotonic() + self.after
            self.severed += severed
        if severed:
            log.warning("postgres answers nothing: connections in use were shut", extra={"connections": severed})


def sever(conn: Any) -> None:
    """Shut the connection's socket: a call blocked on it fails at once."""
    with contextlib.suppress(Exception):  # (already closed: nothing to do)
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
