"""Sessions' dispatch table: each request type and what serves it."""

from __future__ import annotations

from chronicle_contract.sessions import CloseSession, CreateSession, GetSession, ListSessions, UpdateSession

from services.runtime.dispatch import Read, Routes
from services.sessions import commands, queries

ROUTES: Routes = {
    CreateSession: commands.create_session,
    UpdateSession: commands.update_session,
    CloseSession: commands.close_session,
    ListSessions: Read(queries.list_sessions, reads=("history", "stats")),
    GetSession: Read(queries.get_session, reads=("history", "stats")),
}
