"""The client's audit side: one aggregate's events and state, a scope's timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from services import contract_audit as a

if TYPE_CHECKING:
    from services.client import ChronicleClient


class AuditReader:
    """`client.audit`; an auditor's token (roles: ["auditor"]) reads any user's history."""

    def __init__(self, client: ChronicleClient):
        self._client = client

    async def stream(self, aggregate_id: UUID, **fields: Any) -> a.StreamPage:
        """One page of events; `fields`: after_version, limit, at_version or at_time (adds the state)."""
        request = self._client.build(a.AuditStream, aggregate_id=aggregate_id, **fields)
        return await self._client.query("audit.stream", request, a.StreamPage)

    async def events(self, aggregate_id: UUID) -> list[a.AuditEvent]:
        """Every event of the aggregate, following the pages."""
        events: list[a.AuditEvent] = []
        after = 0
        while True:
            page = await self.stream(aggregate_id, after_version=after, limit=1_000)
            events.extend(page.events)
            if page.next_after_version is None:
                return events
            after = page.next_after_version

    async def timeline(self, scope_id: UUID, **fields: Any) -> a.Timeline:
        request = self._client.build(a.AuditTimeline, scope_id=scope_id, **fields)
        return await self._client.query("audit.timeline", request, a.Timeline)

    async def digests(self, **fields: Any) -> a.DigestPage:
        """The latest published digests, latest first (any user); `fields`: limit, before_version.
        Check one against the store with `chronicle audit digest --check POSITION ROOT`."""
        request = self._client.build(a.ListDigests, **fields)
        return await self._client.query("audit.digests", request, a.DigestPage)
