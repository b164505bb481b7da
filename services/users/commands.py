"""Command handlers of users as data subjects: erasure.

Each handler runs inside the writer thread's batch; it never saves (the bus does).
"""

from __future__ import annotations

from chronicle_contract.users import EraseUser, UserErasure

from domain.erasure import DataSubject
from services.runtime.unit_of_work import UnitOfWork


def erase_user(cmd: EraseUser, uow: UnitOfWork) -> UserErasure:
    subject = uow.find(DataSubject, DataSubject.id_for(cmd.user_id)) or uow.add(
        DataSubject.register(user_id=cmd.user_id, at=uow.now)
    )
    erased = subject.erase(at=uow.now, requested_by=uow.user_id)
    uow.forget_owner(cmd.user_id)  # cached aggregates hold the user's decrypted content
    return UserErasure(user_id=cmd.user_id, erased=erased)
