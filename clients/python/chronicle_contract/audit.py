"""The wire contract of audit queries: one aggregate's stream and its hash chain's status, a
session's or conversation's timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import Field

from chronicle_contract.base import MAX_POSITION, Command, Query, Reply, Written

# The most events one audit.verify call recomputes (as many as one audit.stream page holds).
MAX_VERIFIED = 1_000

# The role claim of a token whose holder may read any user's history (each read recorded).
AUDITOR = "auditor"


class AuditEvent(Reply):
    aggregate_id: UUID
    aggregate_type: str
    version: int
    position: int
    type: str
    timestamp: datetime
    payload: dict[str, Any]
    erased: bool = False  # the owner was erased: payload holds only ids and types
    hash: str | None = None


class StreamPage(Reply):
    aggregate_id: UUID
    aggregate_type: str
    owner: str
    events: list[AuditEvent]
    next_after_version: int | None
    state: dict[str, Any] | None = None
    state_version: int | None = None


class ChainBreakAt(Reply):
    version: int
    reason: str  # "hash mismatch", or "missing" (through a version) for versions absent before this one


class ChainStatus(Reply):
    aggregate_id: UUID
    events_checked: int
    intact: bool  # no break among the events checked
    breaks: list[ChainBreakAt]
    through_version: int | None  # the last version checked (None: no event after after_version)
    next_after_version: int | None  # more events follow: ask again with this after_version


class Timeline(Reply):
    scope_id: UUID
    aggregates: int
    events: list[AuditEvent]
    next_after_position: int | None


class Digest(Reply):
    position: int
    root: str
    streams: int
    events: int
    published_at: datetime
    version: int  # the digest event's version in the digest stream
    event_position: int  # the digest event's own notification id
    hash: str  # the digest event's chain hash


class DigestPage(Reply):
    digest_id: UUID
    digests: list[Digest]  # latest first
    next_before_version: int | None


class ReadRecorded(Written):
    trail_id: UUID


class DigestPublished(Written):
    digest_id: UUID
    digest_position: int
    published: bool  # False: a digest at this position or a later one was already recorded


class AuditStream(Query[StreamPage], action="audit.stream"):
    aggregate_id: UUID
    after_version: int = Field(default=0, ge=0, le=MAX_POSITION, description="events with a greater version (paging)")
    limit: int = Field(default=100, ge=1, le=1_000)
    at_version: int | None = Field(
        default=None, ge=1, le=MAX_POSITION, description="also rebuild the state as of this version (with at_time: the earlier of the two)"
    )
    at_time: datetime | None = Field(default=None, description="also rebuild the state as of this time")


class AuditVerify(Query[ChainStatus], action="audit.verify"):
    """Recompute one aggregate's hash chain, at most `limit` events per call (a stream may hold
    millions): a page after `after_version` is anchored on the stored hash of the event before it."""

    aggregate_id: UUID
    after_version: int = Field(default=0, ge=0, le=MAX_POSITION, description="check the events after this version (paging)")
    limit: int = Field(default=MAX_VERIFIED, ge=1, le=MAX_VERIFIED)


class AuditTimeline(Query[Timeline], action="audit.timeline"):
    scope_id: UUID = Field(description="a session or conversation id")
    after_position: int = Field(default=0, ge=0, le=MAX_POSITION, description="events after this notification id (paging)")
    limit: int = Field(default=500, ge=1, le=5_000)


class PublishDigest(Command[DigestPublished], action="audit.publish_digest"):
    """Internal: the digest publisher records a Merkle root it computed (services/audit/digests.py)."""

    position: int = Field(ge=1, le=MAX_POSITION)
    root: str = Field(pattern=r"^[0-9a-f]{64}$")
    streams: int = Field(ge=0, le=MAX_POSITION)
    events: int = Field(ge=0, le=MAX_POSITION)


class ListDigests(Query[DigestPage], action="audit.digests"):
    before_version: int | None = Field(
        default=None, ge=1, le=MAX_POSITION, description="digests before this version of the digest stream (paging)"
    )
    limit: int = Field(default=10, ge=1, le=1_000)


class RecordRead(Command[ReadRecorded], action="audit.record_read"):
    """Internal: an auditor read another user's history (services/audit/queries.py)."""

    what: Literal["stream", "timeline", "aggregate", "verify"]
    aggregate_id: UUID
    aggregate_owner: str
    at_version: int | None = Field(default=None, ge=1, le=MAX_POSITION)
    at_time: datetime | None = None

    def aggregate_ids(self) -> list[UUID]:
        return []  # the read aggregate is not loaded; only the auditor's trail is
