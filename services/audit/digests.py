"""The periodic audit digest: recorded through the command bus, published on a timer, listed by a query.

Every instance may run the publisher. Two that take a digest at the same position both
send it, and the AuditDigest aggregate records it once: the second is decided on the
stream's fresh state (after a version conflict, when the first came from another
instance) and finds the position already covered.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from chronicle_contract.audit import DigestPage, DigestPublished, ListDigests, PublishDigest
from chronicle_contract.errors import ChronicleError
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import get_topic

from domain.digest import DIGEST_ID, SYSTEM_OWNER, AuditDigest
from services.ports.background import Background
from services.ports.digests import StoreDigest, StoreDigests
from services.ports.event_store import EventMapper
from services.ports.read_models import Queries
from services.runtime.command_bus import Execute
from services.runtime.replies import Wire
from services.runtime.unit_of_work import UnitOfWork

log = logging.getLogger(__name__)

PUBLISHED_TOPIC = get_topic(AuditDigest.Published)


def publish_digest(cmd: PublishDigest, uow: UnitOfWork) -> DigestPublished:
    """Internal command `audit.publish_digest`; the reply's `published` is False when a
    digest at this position or a later one is already recorded."""
    digest = uow.find(AuditDigest, DIGEST_ID) or uow.add(AuditDigest.open(at=uow.now))
    published = digest.publish(at=uow.now, **cmd.model_dump())
    return DigestPublished(digest_id=DIGEST_ID, digest_position=cmd.position, published=published)


class Digests:
    """Reads the recorded digests back, through the store's own mapper (the digest stream
    is written like any other)."""

    def __init__(self, queries: Queries, mapper: EventMapper) -> None:
        self.queries = queries
        self.mapper = mapper

    async def published(self, limit: int, before_version: int | None = None) -> list[dict[str, Any]]:
        """The latest digests (before digest stream version `before_version`), latest first;
        digests are recorded at increasing positions, so this is position order too."""
        rows = await self.queries.fetch_all(
            "SELECT originator_version, topic, state, notification_id, hash FROM chronicle.events"
            " WHERE originator_id = %s AND topic = %s AND originator_version < %s"
            " ORDER BY originator_version DESC LIMIT %s",
            (DIGEST_ID, PUBLISHED_TOPIC, before_version or 2**62, limit),
        )
        return [self._described(row) for row in rows]

    def _described(self, row: dict[str, Any]) -> dict[str, Any]:
        stored = StoredEvent(DIGEST_ID, row["originator_version"], row["topic"], bytes(row["state"]))
        event = self.mapper.to_domain_event(stored)
        return {
            "position": event.position,
            "root": event.root,
            "streams": event.streams,
            "events": event.events,
            "published_at": event.timestamp,
            "version": event.originator_version,
            "event_position": row["notification_id"],
            "hash": bytes(row["hash"]).hex(),
        }

    async def list(self, user: str, q: ListDigests) -> Wire[DigestPage]:
        """`audit.digests`: any caller may read them; they reveal only hashes and counts."""
        found = await self.published(q.limit + 1, q.before_version)
        page = found[: q.limit]
        return Wire({
            "digest_id": DIGEST_ID,
            "digests": page,
            "next_before_version": page[-1]["version"] if len(found) > q.limit else None,
        })


class DigestPublisher(Background):
    """Every `interval` seconds, publishes a digest if any stream changed since the last one."""

    name = "audit-digest"

    def __init__(self, store: StoreDigests, digests: Digests, execute: Execute, interval: float) -> None:
        super().__init__()
        self.store = store
        self.digests = digests
        self.execute = execute
        self.interval = interval
        self.checks = 0  # ticks done, published or not (tests wait on it)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.publish_if_changed()
            except asyncio.CancelledError:
                raise
            except (ChronicleError, psycopg.Error) as error:
                log.warning("digest publication failed; retrying", extra={"error_type": type(error).__name__})
            self.checks += 1

    async def publish_if_changed(self) -> StoreDigest | None:
        """The digest this call recorded, or None when nothing changed or another got there first."""
        head = await asyncio.to_thread(self.store.head)
        latest = await self.digests.published(1)
        if head <= (latest[0]["position"] if latest else 0):
            return None
        # Millions of events are read and hashed: a worker thread, never the event loop.
        digest = await asyncio.to_thread(self.store.digest_at, head)
        reply = await self.execute(
            PublishDigest(position=digest.position, root=digest.root_hex, streams=digest.streams, events=digest.events),
            SYSTEM_OWNER,
        )
        if not reply["published"]:
            return None
        log.info("audit digest published", extra={"position": digest.position, "root": digest.root_hex})
        return digest
