"""Command handlers of audit: an auditor's reads of other users' history (the digest's is in digests.py).

Each handler runs inside the writer thread's batch; it never saves (the bus does).
"""

from __future__ import annotations

from chronicle_contract.audit import ReadRecorded, RecordRead

from domain.audit import AuditTrail
from services.runtime.unit_of_work import UnitOfWork


def record_read(cmd: RecordRead, uow: UnitOfWork) -> ReadRecorded:
    trail = uow.find(AuditTrail, AuditTrail.id_for(uow.user_id)) or uow.add(
        AuditTrail.open(auditor=uow.user_id, at=uow.now)
    )
    trail.record_read(at=uow.now, **cmd.model_dump())
    return ReadRecorded(trail_id=trail.id)
