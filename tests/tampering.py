"""What a superuser with direct table access could do to a stored event, undone afterwards so
that the session's shared store verifies again for the tests that follow."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from adapters.store.postgres import PostgresTarget

FLIP = "UPDATE chronicle.events SET state = set_byte(state, 0, get_byte(state, 0) # 1)"
ONE_EVENT = " WHERE originator_id = %s AND originator_version = %s"


@contextmanager
def flipped_byte(target: PostgresTarget, stream: uuid.UUID, version: int) -> Iterator[None]:
    """One bit of the event's stored state flipped (the append-only triggers off for this
    connection only), and flipped back on the way out."""
    with target.connect(autocommit=True) as conn:  # each change seen by the service at once
        conn.execute("SET session_replication_role = replica")
        assert conn.execute(FLIP + ONE_EVENT, (stream, version)).rowcount == 1
        try:
            yield
        finally:
            conn.execute(FLIP + ONE_EVENT, (stream, version))
