"""Opening sessions, shared by every capability that records into one (sessions, optimizations,
artifacts, jobs), so that no capability imports another's handlers."""

from __future__ import annotations

from uuid import UUID

from chronicle_contract.sessions import CreateSession

from domain.current_session import CurrentSession
from domain.session import Session
from services.runtime.unit_of_work import UnitOfWork

CURRENT_SESSION_NAME = "Generated artifacts"


def open_session(cmd: CreateSession, uow: UnitOfWork, session_id: UUID | None = None) -> Session:
    return uow.add(
        Session.create(
            id=session_id or uow.new_id(),
            owner=uow.user_id,
            at=uow.now,
            name=cmd.name,
            description=cmd.description,
            kind=cmd.kind,
            tags=cmd.tags,
            metadata=cmd.metadata,
        )
    )


def session_for(session_id: UUID | None, uow: UnitOfWork) -> Session:
    """The session named, or the caller's current one (opened on first use, and again
    when the current one was closed)."""
    if session_id is not None:
        session = uow.get(Session, session_id)
        session.check_open()
        return session
    current = uow.find(CurrentSession, CurrentSession.id_for(uow.user_id))
    if current is not None:
        found = uow.find(Session, current.session_id)
        if found is not None and not found.closed:
            return found
    session = open_session(CreateSession(name=CURRENT_SESSION_NAME, kind="generation"), uow)
    if current is None:
        uow.add(CurrentSession.choose(owner=uow.user_id, session_id=session.id, at=uow.now))
    else:
        current.move_to(session_id=session.id, at=uow.now)
    return session
