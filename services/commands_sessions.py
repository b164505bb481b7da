"""Opening a session: shared by session.create and optimization.start (an optimization is a session)."""

from __future__ import annotations

from domain.session import Session
from services import contract as c
from services.unit_of_work import UnitOfWork


def open_session(cmd: c.CreateSession, uow: UnitOfWork) -> Session:
    return uow.add(
        Session.create(
            id=uow.new_id(),
            owner=uow.user_id,
            at=uow.now,
            name=cmd.name,
            description=cmd.description,
            kind=cmd.kind,
            tags=cmd.tags,
            metadata=cmd.metadata,
        )
    )
