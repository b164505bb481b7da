"""Group commit: commands that arrive together are decided and saved in one transaction.

One writer thread owns the aggregate cache. It takes every command waiting in its queue,
runs each handler on cached (or batch-loaded) aggregates, and saves all their events and
idempotency records in a single transaction; each caller gets its reply only after that
commit. A version conflict (another instance wrote first) re-runs the batch on fresh state.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import queue
import random
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast
from uuid import UUID

from chronicle_contract.base import Command
from chronicle_contract.errors import ChronicleError
from eventsourcing.persistence import IntegrityError, StoredEvent

from domain.base import SYSTEM_OWNER
from domain.erasure import DataSubject, UserErased
from services.ports.event_store import ErasedContent, IdempotencyRecord, KeyTaken, Store, StoredReply
from services.ports.failures import Failures
from services.ports.metrics import CommitMetrics
from services.ports.relays import Committed
from services.runtime.dispatch import Decide
from services.runtime.queues import drain
from services.runtime.replies import ReplyT, Wire
from services.runtime.snapshots import SnapshotTaker
from services.runtime.unit_of_work import AggregateCache, UnitOfWork

log = logging.getLogger(__name__)

# What services outside the bus call to have a command decided: (command, user id) -> reply.
Execute = Callable[[Command[Any], str], Awaitable[dict[str, Any]]]
# Told each commit's events on the writer thread, before the replies go out.
CommitListener = Callable[[Committed], None]
MAX_ATTEMPTS = 16
# A command without a key keeps no record, so no request is compared with it (and it is
# not serialised to make a fingerprint).
NO_KEY_FINGERPRINT = ""
CONFLICT_BACKOFF = 0.001  # seconds; doubled per attempt, randomised


def fingerprint(name: str, payload: Command) -> str:
    return hashlib.sha256(name.encode() + b"\0" + payload.model_dump_json().encode()).hexdigest()


@dataclass
class Submission:
    name: str
    payload: Command
    user_id: str
    key: str  # the client's Idempotency-Key ("": none)
    client_key: bool
    fingerprint: str
    future: asyncio.Future[dict[str, Any]]
    loop: asyncio.AbstractEventLoop
    reply: dict[str, Any] | None = None
    sealed_reply: bytes | None = None  # the reply as its idempotency record keeps it
    error: ChronicleError | None = None
    events: list[Any] = field(default_factory=list)
    owners: dict[UUID, str | None] = field(default_factory=dict)  # aggregate id -> owner to seal for
    saved: dict[UUID, Any] = field(default_factory=dict)  # aggregate id -> the aggregate, for snapshots
    read: dict[UUID, int] = field(default_factory=dict)  # aggregate id -> version, of those only read from the cache
    duplicate_of: Submission | None = None
    replayed: bool = False
    # An unkeyed command's last save, whose outcome may have gone unheard (the connection
    # dropped at its commit): its events as sent and its reply as decided (_answer_unheard).
    tried: list[StoredEvent] = field(default_factory=list)
    tried_reply: dict[str, Any] | None = None

    def resolve(self) -> None:
        """Hand the caller its reply or error (on its event loop)."""
        if self.future.done():
            return
        if self.error is not None:
            self.future.set_exception(self.error)
        else:
            self.future.set_result(self.reply or {})


def settle(batch: list[Submission]) -> None:
    """Resolve a committed batch's futures: one call into each caller's event loop for the
    whole batch, not one per command (each call across threads writes to the loop's wake-up
    pipe and has it run a callback: ~60 of each per group commit at 100 in flight)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Submission]] = {}
    for s in batch:
        by_loop.setdefault(s.loop, []).append(s)
    for loop, submissions in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve_all, submissions)
        except RuntimeError:  # that loop is closed: nobody waits there any more
            log.warning("a committed batch's callers had gone", extra={"commands": len(submissions)})


def _resolve_all(submissions: list[Submission]) -> None:
    for s in submissions:
        s.resolve()


RACED_REFUSALS = ("conflict", "not_found", "invalid")  # what an aggregate's guard answers
OTHERS_WINDOW = 60.0  # seconds after another writer was last seen during which cached aggregates are checked


class _StaleReads(Exception):
    """What the batch read from the cache was written since by another instance."""


class _Rerun(Exception):
    """A handler failed after changing an aggregate: redo the batch without it."""

    def __init__(self, culprit: Submission, failure: ChronicleError):
        super().__init__(failure.message)
        self.culprit = culprit
        self.failure = failure


class CommandBus:
    def __init__(
        self,
        store: Store,
        handlers: dict[type[Command[Any]], Decide],
        *,
        failures: Failures,
        max_batch: int = 512,
        cache_size: int = 20_000,
        cache_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_id: Callable[[], UUID] = uuid.uuid4,
        snapshots: SnapshotTaker | None = None,
        metrics: CommitMetrics | None = None,
    ) -> None:
        self.store = store
        self.failures = failures
        self.metrics = metrics
        self.snapshots = snapshots
        self.handlers = handlers
        self.max_batch = max_batch
        self.cache = AggregateCache(cache_size, cache_bytes)
        self.clock = clock
        self.new_id = new_id
        self.conflicts = 0
        self.stale_reads = 0  # batches decided again: another instance had written what they read
        self._last_position = 0  # of this bus's last commit
        self._others_seen_at = -OTHERS_WINDOW  # when another writer's events or a conflict were last seen
        self.batches = 0
        self.commit_listeners: list[CommitListener] = []
        self._queue: queue.SimpleQueue[Submission | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="chronicle-writer", daemon=True)
        if metrics is not None:  # read when scraped
            metrics.watch_queue(self._queue.qsize)

    def start(self) -> None:
        if self.snapshots is not None:
            self.snapshots.start()
        self._thread.start()

    def stop(self) -> None:
        """Finish what is queued, then stop the writer thread (and write its snapshots)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self.snapshots is not None:
            self.snapshots.stop()

    async def execute(
        self,
        payload: Command[ReplyT],
        user_id: str,
        idempotency_key: str | None = None,
        *,
        request_fingerprint: str | None = None,
    ) -> Wire[ReplyT]:
        """Decide and save one command; `request_fingerprint` names the caller's own request
        when a service turned it into this command (a retry must match that, not this)."""
        return Wire(await self.submit(payload, user_id, idempotency_key, request_fingerprint=request_fingerprint))

    def submit(
        self,
        payload: Command[Any],
        user_id: str,
        idempotency_key: str | None = None,
        *,
        request_fingerprint: str | None = None,
    ) -> asyncio.Future[dict[str, Any]]:
        """`execute` without awaiting: the command is queued, and the future (of the running
        event loop) gets its reply, or its error, once its group commit is over."""
        loop = asyncio.get_running_loop()
        name = payload.action
        submission = Submission(
            name=name,
            payload=payload,
            user_id=user_id,
            key=idempotency_key or "",
            client_key=idempotency_key is not None,
            fingerprint=request_fingerprint
            or (fingerprint(name, payload) if idempotency_key is not None else NO_KEY_FINGERPRINT),
            future=loop.create_future(),
            loop=loop,
        )
        self._queue.put(submission)
        return submission.future

    async def execute_prepared(
        self,
        request: Command[ReplyT],
        user_id: str,
        idempotency_key: str | None,
        prepare: Callable[[], Awaitable[Command[Any]]],
    ) -> Wire[ReplyT]:
        """For a request that needs slow work first (a generator call, a retrieval): unless
        this key was answered before, `prepare()` does the work and names the internal
        command that stores its outcome, which runs fingerprinted as the caller's request."""
        request_fingerprint = None
        if idempotency_key is not None:
            request_fingerprint = fingerprint(request.action, request)
            reply = await self.stored_reply(user_id, idempotency_key, request_fingerprint)
            if reply is not None:
                return Wire(reply)
        command = await prepare()
        return await self.execute(command, user_id, idempotency_key, request_fingerprint=request_fingerprint)

    async def stored_reply(self, user_id: str, idempotency_key: str, request_fingerprint: str) -> dict[str, Any] | None:
        """The reply already given to this key, for a service that must not redo slow work
        (a generator call) on a retry; conflict when the key named another request."""
        def read() -> tuple[str, dict[str, Any]] | None:
            found = self.store.recorder.replies([(user_id, idempotency_key)])
            stored = found.get((user_id, idempotency_key))
            return None if stored is None else self._open_reply(user_id, idempotency_key, stored)

        opened = await asyncio.to_thread(read)
        if opened is None:
            return None
        known_fingerprint, reply = opened
        if known_fingerprint != request_fingerprint:
            raise key_reused()
        return reply

    def _open_reply(self, user_id: str, key: str, stored: StoredReply) -> tuple[str, dict[str, Any]]:
        """(request fingerprint, reply as first sent) of a stored record; UserErased when
        its owner's key is gone."""
        try:
            inner_fingerprint, reply = self.store.mapper.open_reply(user_id, key, stored.reply)
        except ErasedContent:
            raise UserErased(f"user {user_id} was erased", field="owner", rule="not_erased") from None
        if stored.position is not None:
            reply["position"] = stored.position
        return inner_fingerprint or stored.fingerprint, reply

    # --- writer thread --------------------------------------------------------------------

    def _run(self) -> None:
        drain(self._queue, self.max_batch, self._commit_batch)

    def _commit_batch(self, batch: list[Submission]) -> None:
        self.batches += 1
        started = time.perf_counter()
        try:
            self._commit(batch)
            self._answer_raced_keys(batch)
        except Exception as error:  # a bug costs this batch its answers, never the writer thread
            log.exception("group commit failed")
            failure = self.failures.translate(error)
            for s in batch:
                if s.reply is None and s.error is None:
                    s.error = failure
        if self.metrics is not None:
            self.metrics.committed(len(batch), time.perf_counter() - started)
        for s in batch:
            if s.duplicate_of is not None:
                s.reply, s.error = s.duplicate_of.reply, s.duplicate_of.error
        settle(batch)

    def _commit(self, batch: list[Submission]) -> None:
        """Decide and save the batch; each submission ends with its reply or its error."""
        pending = list(batch)
        saved, committed = False, []
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                committed = self._decide_and_save(pending, replay_all_keys=attempt > 1)
                saved = True
                break
            except _Rerun as rerun:
                self._forget(pending)
                pending.remove(rerun.culprit)
                rerun.culprit.error = rerun.failure
            except KeyTaken:
                # A key sent before (a retry, or its first send committing elsewhere):
                # decided again with every key looked up, now that one is known to be
                # stored. No pause: a key stored is not contention.
                self._forget(pending)
            except _StaleReads:
                self._forget(pending)
                self._others_seen_at = time.monotonic()  # (another writer: catch copies up from now on)
                if self.metrics is not None:
                    self.metrics.conflicted()
            except IntegrityError:
                # Another writer got there first: forget what we believed and decide again,
                # after a random pause that grows, so two instances stop colliding.
                self.conflicts += 1
                self._others_seen_at = time.monotonic()
                if self.metrics is not None:
                    self.metrics.conflicted()
                self._forget(pending)
                time.sleep(random.uniform(0, CONFLICT_BACKOFF * 2 ** min(attempt, 6)))
            except Exception as error:  # the database failed: nobody's events were saved
                self._forget(pending)
                if len(pending) > 1 and self.failures.statement_failed(error):
                    # One command's values broke the statement, not the database: each
                    # saved alone, only that one fails.
                    for s in pending:
                        self._commit([s])
                    return
                failure = self.failures.translate(error)
                for s in pending:
                    s.error = failure
                break
        else:
            for s in pending:
                s.error = ChronicleError("conflict", "too much contention on this aggregate; retry")
        if saved:  # what the commands changed may have grown: counted at its new size
            self.cache.remeasure({i for s in pending for i in s.saved})
        if saved and committed:
            self._tell_listeners(committed)
        if saved and self.snapshots is not None:
            self.snapshots.after_commit(saved_aggregates(pending))

    def _answer_raced_keys(self, batch: list[Submission]) -> None:
        """A keyed command refused by the aggregate may have been refused because of itself:
        a retry whose first send committed (keys are not looked up before a first attempt:
        see _decide_and_save), or one that reached this instance while its first send was
        committing on another (a NATS node or the other instance died before the reply came),
        decides on the state the first send made ("run is not paused"). The first send's
        reply, stored with its events, is then the answer, not the refusal; a key stored
        for another request is `conflict`, as it is before deciding. (A refusal made on
        state that did not include the first send's events is not caused by it.)"""
        refused = [
            s for s in batch
            if s.client_key and s.error is not None and s.duplicate_of is None and s.error.code in RACED_REFUSALS
        ]
        if not refused:
            return
        try:
            stored = self.store.recorder.replies([(s.user_id, s.key) for s in refused])
        except Exception:  # the refusal stands; a retry will find the stored reply
            log.warning("could not look for a raced key's reply", exc_info=True)
            return
        for s in refused:
            if (s.user_id, s.key) not in stored:
                continue
            try:
                known_fingerprint, reply = self._open_reply(s.user_id, s.key, stored[(s.user_id, s.key)])
            except UserErased as erased:
                s.error = self.failures.translate(erased)
                continue
            except Exception:  # (its key could not be read now: the refusal stands, a retry finds the reply)
                log.warning("could not open a raced key's reply", exc_info=True)
                continue
            if known_fingerprint == s.fingerprint:
                s.reply, s.error, s.replayed = reply, None, True
            else:
                s.error = key_reused()

    def _tell_listeners(self, committed: Committed) -> None:
        for listener in self.commit_listeners:
            try:
                listener(committed)
            except Exception:  # a listener's bug must not cost anyone their reply
                log.exception("commit listener failed", extra={"listener": getattr(listener, "__qualname__", "?")})

    def _forget(self, batch: list[Submission]) -> None:
        """Drop cached state the batch may have changed and clear its unsaved decisions."""
        self.cache.evict({e.originator_id for s in batch for e in s.events})
        self.cache.evict({i for s in batch for i in s.payload.aggregate_ids()})
        for s in batch:
            s.error, s.reply, s.sealed_reply, s.events, s.duplicate_of, s.replayed = None, None, None, [], None, False
            s.owners, s.saved, s.read = {}, {}, {}

    def _decide_and_save(self, batch: list[Submission], *, replay_all_keys: bool) -> Committed:
        # A first attempt looks no key up: a key is almost always new, and one sent before
        # fails the save (KeyTaken: every key is looked up on the next attempt) or, refused
        # by the aggregate, is looked up then (_answer_raced_keys). One round trip less
        # for a batch with keys.
        keys = [(s.user_id, s.key) for s in batch if s.client_key] if replay_all_keys else []
        stored_replies = self.store.recorder.replies(keys)
        self._answer_unheard(batch)
        self._prefetch(batch)
        seen: dict[tuple[str, str], Submission] = {}
        erased_here: set[str] = set()  # users this batch erases: nothing more of theirs in it
        for s in batch:
            if s.replayed:  # (its earlier save committed: _answer_unheard)
                continue
            if s.user_id in erased_here:
                s.error = self.failures.translate(UserErased(f"user {s.user_id} was erased", field="owner", rule="not_erased"))
                continue
            first = seen.setdefault((s.user_id, s.key), s) if s.client_key else s
            if first is not s:  # (a key sent twice in the batch; an unkeyed command is never one)
                self._check_same_request(s, first.fingerprint)
                s.duplicate_of = None if s.error else first
                continue
            if (s.user_id, s.key) in stored_replies:
                try:
                    known_fingerprint, reply = self._open_reply(s.user_id, s.key, stored_replies[(s.user_id, s.key)])
                except UserErased as erased:
                    s.error = self.failures.translate(erased)
                    continue
                self._check_same_request(s, known_fingerprint)
                if s.error is None:
                    s.reply, s.replayed = reply, True
                continue
            self._decide(s, first_attempt=not replay_all_keys)
            erased_here |= {e.user_id for e in s.events if isinstance(e, DataSubject.Erased)}
        self._check_reads(batch)
        return self._save(batch)

    def _answer_unheard(self, batch: list[Submission]) -> None:
        """An unkeyed command keeps no record. If its batch's save was not heard to commit
        (the connection dropped at the commit; tried again, it met its own versions taken),
        its events are looked for as it sent them (their sealed states are its own): found,
        it is answered as it decided then, not decided again on the state it made. (Found
        once, they are asked for again on each later attempt the rest of the batch needs.)"""
        tried = [s for s in batch if s.tried]
        if not tried:
            return
        found = self.store.recorder.positions_of([e for s in tried for e in s.tried])
        for s in tried:
            positions = [found.get((e.originator_id, e.originator_version)) for e in s.tried]
            if None in positions or s.tried_reply is None:
                s.tried, s.tried_reply = [], None  # not saved: decided again
            else:
                s.reply, s.replayed = {**s.tried_reply, "position": max(cast(list[int], positions))}, True

    def _check_same_request(self, s: Submission, known_fingerprint: str) -> None:
        if known_fingerprint != s.fingerprint:
            s.error = key_reused()

    def _prefetch(self, batch: list[Submission]) -> None:
        ids = {i for s in batch for i in s.payload.aggregate_ids()}
        if time.monotonic() - self._others_seen_at < OTHERS_WINDOW:
            # Another instance writes to this log: an aggregate cached here may be behind
            # (consecutive commands on one conversation land on any instance of the queue
            # group). One query brings the events stored since each cached version, folded
            # in, rather than deciding on a stale copy, meeting a version conflict, and
            # loading it whole again after a backoff.
            cached = {i: aggregate for i in ids if (aggregate := self.cache.get(i)) is not None}
            if cached:
                try:
                    changed, dropped = self.store.catch_up(cached)
                except Exception:  # a copy may be half caught up: none is kept
                    self.cache.evict(cached)
                    raise
                self.cache.evict(dropped)
                self.cache.remeasure(changed)
        wanted = {i for i in ids if i not in self.cache}
        if wanted:
            for aggregate in self.store.load_many(wanted).values():
                self.cache.put(aggregate)

    def _note_positions(self, first: int, last: int) -> None:
        """A commit that does not follow this bus's previous one: another writer appended between."""
        if self._last_position and first != self._last_position + 1:
            self._others_seen_at = time.monotonic()
        self._last_position = last

    def _decide(self, s: Submission, *, first_attempt: bool) -> None:
        uow = UnitOfWork(
            user_id=s.user_id, now=self.clock(), new_id=self.new_id, cache=self.cache, load=self.store.load_many,
            first_attempt=first_attempt,
        )
        try:
            s.reply = self.handlers[type(s.payload)](s.payload, uow)
            if s.client_key:  # a record is kept (an unkeyed command's lost commit: _answer_unheard)
                owner = None if s.user_id == SYSTEM_OWNER else s.user_id
                s.sealed_reply = self.store.mapper.seal_reply(owner, s.key, s.fingerprint, s.reply)
            keys = self.store.mapper.keys
            if keys is not None:  # an erased owner gets no new events (and a key is made on first write)
                for aggregate in uow.touched.values():
                    if aggregate.pending_events and aggregate.owner != SYSTEM_OWNER:
                        keys.key_for_writing(aggregate.owner)
        except Exception as error:
            s.error = self.failures.translate(error)
            if any(a.pending_events for a in uow.touched.values()):
                self.cache.evict(uow.touched)
                raise _Rerun(s, s.error) from None
        s.read = uow.cached_reads()
        if s.error is not None:
            return
        for aggregate in uow.touched.values():
            events = aggregate.collect_events()
            if events:
                s.events.extend(events)
                # The system's own records (erasures, digests) stay unsealed: no user key to lose.
                s.owners[aggregate.id] = None if aggregate.owner == SYSTEM_OWNER else aggregate.owner
                s.saved[aggregate.id] = aggregate

    def _check_reads(self, batch: list[Submission]) -> None:
        """Another instance may have written an aggregate since this one cached it. What a
        command writes is checked by the store (its version is taken: a conflict); what it
        only read from the cache, deciding a refusal or an answer that saves nothing (a
        take hearing `paused` of a run another instance resumed), is checked here, in one
        query for the batch: one written since is dropped and the batch decided again."""
        seen: dict[UUID, int] = {}
        for s in batch:
            for aggregate_id, version in s.read.items():
                seen[aggregate_id] = min(version, seen.get(aggregate_id, version))
        stale = self.store.recorder.changed(seen) if seen else set()
        if stale:
            self.stale_reads += 1
            self.cache.evict(stale)
            raise _StaleReads

    def _save(self, batch: list[Submission]) -> Committed:
        """Save the batch's decisions in one transaction; return its (position, event, owner) triples."""
        decided = [s for s in batch if s.reply is not None and s.error is None and not s.replayed]
        decided = [s for s in decided if s.duplicate_of is None]
        stored = [self.store.mapper.to_stored_event(e, s.owners[e.originator_id]) for s in decided for e in s.events]
        replies, events_so_far = [], 0
        for s in decided:
            if not s.client_key and s.events:  # (until heard committed: _answer_unheard)
                # (the reply itself, not a copy: only a heard commit adds its position to it)
                s.tried, s.tried_reply = stored[events_so_far:events_so_far + len(s.events)], s.reply
            events_so_far += len(s.events)
            if s.sealed_reply is not None:
                last_event = events_so_far - 1 if s.events else None
                replies.append(IdempotencyRecord(s.user_id, s.key, "", s.sealed_reply, last_event))
        # Whose content the statement seals (refused if their erasure came first), and whose
        # erasure it records (their keys go with it): adapters/store/event_store.py.
        writers = {owner for s in decided for owner in s.owners.values() if owner is not None}
        writers |= {r.owner for r in replies if r.owner != SYSTEM_OWNER}
        erased = {e.user_id for s in decided for e in s.events if isinstance(e, DataSubject.Erased)}
        recorded = self.store.recorder.record(stored, replies, writers=writers - erased, erased=erased)
        for s in decided:  # (heard: committed)
            s.tried, s.tried_reply = [], None
        if recorded:
            self._note_positions(recorded[0], recorded[-1])
        positions = iter(recorded)
        committed: Committed = []
        for s in decided:
            committed.extend((next(positions), event, s.owners[event.originator_id]) for event in s.events)
            if s.events and s.reply is not None:
                s.reply["position"] = committed[-1][0]
        return committed


def key_reused() -> ChronicleError:
    return ChronicleError(
        "conflict",
        "Idempotency-Key was already used for a different request",
        [{"field": "Idempotency-Key", "rule": "same_request", "message": "key reused"}],
    )


def saved_aggregates(batch: list[Submission]) -> list[tuple[Any, int]]:
    """Each aggregate a committed batch changed, with its version before the batch."""
    before: dict[UUID, int] = {}
    aggregates: dict[UUID, Any] = {}
    for s in batch:
        for event in s.events:
            version = event.originator_version - 1
            before[event.originator_id] = min(before.get(event.originator_id, version), version)
        aggregates.update(s.saved)
    return [(aggregates[i], version) for i, version in before.items() if i in aggregates]
