"""The AuditDigest aggregate: the store's published Merkle roots over every stream's head hash."""

from __future__ import annotations

import re
from datetime import datetime
from uuid import UUID

from domain.base import SYSTEM_OWNER, Aggregate
from domain.errors import InvalidCommand

# One digest stream for the whole store, owned by the service itself, not by a user.
DIGEST_ID = UUID("0c8e7f4a-3d52-4b6e-9a1f-6d2c0b9e7a15")
ROOT_PATTERN = re.compile(r"[0-9a-f]{64}")


class AuditDigestAttributes:
    # What its events set (declared here, not on the aggregate: see domain/snapshot.py state_of).
    position: int


class AuditDigest(AuditDigestAttributes, Aggregate):
    """State: `position`, the notification id the latest digest was taken at (0: none yet)."""


    class Opened(Aggregate.Created):
        def apply(self, digest: AuditDigest) -> None:
            super().apply(digest)
            digest.position = 0

    class Published(Aggregate.Event):
        """The Merkle root over every stream's head as of notification id `position`
        (layout: docs/architecture.md, "Audit: periodic digest")."""

        position: int
        root: str  # 64 lowercase hex digits
        streams: int
        events: int

        def apply(self, digest: AuditDigest) -> None:
            digest.position = self.position

    @classmethod
    def open(cls, *, at: datetime) -> AuditDigest:
        return cls._create(cls.Opened, id=DIGEST_ID, timestamp=at, owner=SYSTEM_OWNER)

    def publish(self, *, at: datetime, position: int, root: str, streams: int, events: int) -> bool:
        """Record a digest; a position not past the last one is already covered (another
        instance got there first) and records nothing. True when recorded."""
        if not ROOT_PATTERN.fullmatch(root):
            raise InvalidCommand("root must be 64 lowercase hex digits", field="root", rule="pattern")
        if position < 1 or streams < 0 or events < streams:
            raise InvalidCommand("a digest needs position >= 1 and events >= streams >= 0", field="position")
        if position <= self.position:
            return False
        self.trigger_event(self.Published, timestamp=at, position=position, root=root, streams=streams, events=events)
        return True
