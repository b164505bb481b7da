"""Audit's dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.audit import AuditStream, AuditTimeline, ListDigests, PublishDigest, RecordRead

from services.audit import commands
from services.audit.digests import Digests, publish_digest
from services.audit.queries import Audit
from services.runtime.dispatch import Internal, Read, Routes

ROUTES: Routes = {
    AuditStream: Read(Audit.stream, reads=(), on=Audit),
    AuditTimeline: Read(Audit.timeline, reads=("audit",), on=Audit),
    # Any caller may read the digests: they reveal only hashes and counts.
    ListDigests: Read(Digests.list, reads=(), on=Digests),
}

# Issued by the service itself: an auditor's reads, the periodic digest.
INTERNAL: Internal = {
    RecordRead: commands.record_read,
    PublishDigest: publish_digest,
}
