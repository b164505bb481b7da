"""The client's audit side: one aggregate's events, state and hash chain, a scope's timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from chronicle_contract.audit import (
    AuditEvent,
    AuditStream,
    AuditTimeline,
    AuditVerify,
    ChainStatus,
    DigestPage,
    ListDigests,
    StreamPage,
    Timeline,
)

if TYPE_CHECKING:
    from chronicle_client.transport import Transport


class AuditReader:
    """`client.audit`; an auditor's token (roles: ["auditor"]) reads any user's history."""

    def __init__(self, client: Transport):
        self._client = client

    async def stream(self, aggregate_id: UUID, **fields: Any) -> StreamPage:
        """One page of events; `fields`: after_version, limit, at_version or at_time (adds the state)."""
        request = self._client.build(AuditStream, aggregate_id=aggregate_id, **fields)
        return await self._client.query(request)

    async def events(self, aggregate_id: UUID) -> list[AuditEvent]:
        """Every event of the aggregate, following the pages."""
        events: list[AuditEvent] = []
        after = 0
        while True:
            page = await self.stream(aggregate_id, after_version=after, limit=1_000)
            events.extend(page.events)
            if page.next_after_version is None:
                return events
            after = page.next_after_version

    async def verify(self, aggregate_id: UUID, **fields: Any) -> ChainStatus:
        """The aggregate's hash chain recomputed, at most `limit` (1,000) events from `after_version`;
        follow `next_after_version` for the rest of a longer stream."""
        request = self._client.build(AuditVerify, aggregate_id=aggregate_id, **fields)
        return await self._client.query(request)

    async def timeline(self, scope_id: UUID, **fields: Any) -> Timeline:
        request = self._client.build(AuditTimeline, scope_id=scope_id, **fields)
        return await self._client.query(request)

    async def digests(self, **fields: Any) -> DigestPage:
        """The latest published digests, latest first (any user); `fields`: limit, before_version.
        Check one against the store with `chronicle audit digest --check POSITION ROOT`."""
        request = self._client.build(ListDigests, **fields)
        return await self._client.query(request)
