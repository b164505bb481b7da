"""`audit.verify`: one aggregate's hash chain recomputed, a bounded span of events at a time.

Scoped as `audit.stream` is: the owner checks their own stream; an auditor may check anyone's,
and the check is recorded on the auditor's trail like a read. It reads no content, only the
stored bytes a hash covers (services/ports/chains.py).
"""

from __future__ import annotations

from chronicle_contract.audit import AuditVerify, ChainStatus

from services.audit.queries import Audit
from services.ports.chains import StreamChains
from services.runtime.replies import Wire


class ChainCheck:
    def __init__(self, audit: Audit, chains: StreamChains) -> None:
        self.audit = audit
        self.chains = chains

    async def verify(self, caller: str, q: AuditVerify) -> Wire[ChainStatus]:
        """Up to `limit` events after `after_version`, each against the stored hash of the one
        before it; `next_after_version` says where the next span starts."""
        await self.audit.readable_stream(caller, q.aggregate_id, "verify")
        span = await self.chains.verify(q.aggregate_id, q.after_version, q.limit)
        return Wire({
            "aggregate_id": q.aggregate_id,
            "events_checked": span.events,
            "intact": not span.breaks,
            "breaks": [{"version": version, "reason": reason} for version, reason in span.breaks],
            "through_version": span.through_version,
            "next_after_version": span.through_version if span.more else None,
        })
