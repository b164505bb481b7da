"""Command handlers of sessions: create, update, close.

`open_session` (services/runtime/sessions.py) is shared with optimization.start: an optimization is a session.
"""

from __future__ import annotations

from uuid import UUID

from chronicle_contract.base import Written
from chronicle_contract.sessions import CloseSession, CreateSession, SessionCreated, UpdateSession

from domain.session import Session
from services.runtime.sessions import open_session
from services.runtime.unit_of_work import UnitOfWork


class SessionWritten(Written):
    """What session.update and session.close send: the contract promises their position;
    the session's id has always come with it."""

    session_id: UUID


def create_session(cmd: CreateSession, uow: UnitOfWork) -> SessionCreated:
    return SessionCreated(session_id=open_session(cmd, uow).id)


def update_session(cmd: UpdateSession, uow: UnitOfWork) -> SessionWritten:
    session = uow.get(Session, cmd.session_id)
    session.update(at=uow.now, name=cmd.name, description=cmd.description, tags=cmd.tags)
    return SessionWritten(session_id=session.id)


def close_session(cmd: CloseSession, uow: UnitOfWork) -> SessionWritten:
    session = uow.get(Session, cmd.session_id)
    session.close(at=uow.now)
    return SessionWritten(session_id=session.id)
