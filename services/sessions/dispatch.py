"""Sessions' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.sessions import CloseSession, CreateSession, GetSession, ListSessions, UpdateSession

from services.runtime.dispatch import Decide, Read
from services.sessions import commands, queries

ROUTES = (
    Decide(CreateSession, commands.create_session),
    Decide(UpdateSession, commands.update_session),
    Decide(CloseSession, commands.close_session),
    Read(ListSessions, queries.list_sessions, reads=("history", "stats")),
    Read(GetSession, queries.get_session, reads=("history", "stats")),
)
