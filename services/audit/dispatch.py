"""Audit's dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.audit import AuditStream, AuditTimeline, AuditVerify, ListDigests, PublishDigest, RecordRead

from services.audit import commands
from services.audit.chains import ChainCheck
from services.audit.digests import Digests, publish_digest
from services.audit.queries import Audit
from services.runtime.dispatch import Decide, Read

ROUTES = (
    Read(AuditStream, Audit.stream, reads=(), on=Audit),
    Read(AuditVerify, ChainCheck.verify, reads=(), on=ChainCheck),
    Read(AuditTimeline, Audit.timeline, reads=("audit",), on=Audit),
    # Any caller may read the digests: they reveal only hashes and counts.
    Read(ListDigests, Digests.list, reads=(), on=Digests),
)

# Issued by the service itself: an auditor's reads, the periodic digest.
INTERNAL = (
    Decide(RecordRead, commands.record_read),
    Decide(PublishDigest, publish_digest),
)
