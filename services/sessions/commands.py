"""Command handlers of sessions: create, update, close.

`open_session` is shared by session.create and optimization.start (an optimization is a session).
"""

from __future__ import annotations

from typing import Any

from chronicle_contract.sessions import CloseSession, CreateSession, UpdateSession

from domain.session import Session
from services.runtime.unit_of_work import UnitOfWork


def open_session(cmd: CreateSession, uow: UnitOfWork) -> Session:
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


def create_session(cmd: CreateSession, uow: UnitOfWork) -> dict[str, Any]:
    return {"session_id": str(open_session(cmd, uow).id)}


def update_session(cmd: UpdateSession, uow: UnitOfWork) -> dict[str, Any]:
    session = uow.get(Session, cmd.session_id)
    session.update(at=uow.now, name=cmd.name, description=cmd.description, tags=cmd.tags)
    return {"session_id": str(session.id)}


def close_session(cmd: CloseSession, uow: UnitOfWork) -> dict[str, Any]:
    session = uow.get(Session, cmd.session_id)
    session.close(at=uow.now)
    return {"session_id": str(session.id)}
