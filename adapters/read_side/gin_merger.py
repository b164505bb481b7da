"""GinMerger: the read models' GIN pending lists merged from a connection of its own, off the projections' path.

A GIN index with `fastupdate` puts new entries in a pending list and merges the list into
the index once it passes `gin_pending_list_limit`, inside whichever insert passed it. The
search read model's blind terms are keyed per user, so its index holds users x words
distinct keys, and each merge descends the tree for every one of them: with a 256 kB list,
a merge every few batches made the search projection the slowest of all (115 us of its
transaction per chat message under load against 62 with plain lexemes; projection lag p50
31 ms against 9). Here a thread merges every pending list of the live read models every
`every` seconds (`gin_clean_pending_list`, which waits for no insert: an insert only
appends to the list, and one that finds a merge running leaves the merge to it). So the
projections' own inserts only append, the list stays small for searches (which read all of
it), and the limit (4 MB on the search index) is only a bound for when this thread is behind.
A rebuild merges the same way while it loads a read model's scratch tables (`merging`), for
the indexes a view makes with its tables (PostgresView.merged_while_loading).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator

import psycopg
from psycopg.sql import SQL

from adapters.store.postgres import PostgresTarget
from adapters.store.reachability import RECONNECT_WAIT_MAX

log = logging.getLogger(__name__)

MERGE_EVERY = 0.2  # seconds
MERGE = SQL(
    "SELECT coalesce(sum(gin_clean_pending_list(c.oid::regclass)), 0) FROM pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am a ON a.oid = c.relam"
    " WHERE n.nspname = ANY(%s) AND a.amname = 'gin' AND c.relkind = 'i'"
)


@contextlib.contextmanager
def merging(target: PostgresTarget, schemas: list[str]) -> Iterator[None]:
    """The GIN pending lists of `schemas` merged every MERGE_EVERY seconds meanwhile (a
    rebuild's scratch tables while it loads them); none if `schemas` is empty."""
    if not schemas:
        yield
        return
    stop = threading.Event()
    merger = GinMerger(target, schemas, stop, name="rebuild-gin-merger")
    merger.thread.start()
    try:
        yield
    finally:
        stop.set()
        merger.thread.join()


class GinMerger:
    def __init__(self, target: PostgresTarget, schemas: list[str], stop: threading.Event, every: float = MERGE_EVERY,
                 name: str = "projection-gin-merger"):
        self.target = target
        self.schemas = sorted(schemas)
        self.stop = stop
        self.every = every
        self.merged_pages = 0  # pending-list pages merged so far
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        backoff = 0.1
        while not self.stop.is_set():
            try:
                with self.target.connect(autocommit=True) as conn:
                    backoff = 0.1
                    while not self.stop.wait(self.every):
                        row = conn.execute(MERGE, (self.schemas,), prepare=True).fetchone()
                        self.merged_pages += int(row[0]) if row else 0
            except psycopg.errors.InsufficientPrivilege:  # (not the indexes' owner: the inserts merge, as before)
                log.warning("cannot merge the read models' GIN pending lists: not their owner")
                return
            except psycopg.Error as error:
                log.warning("GIN pending-list merge failed; retrying", extra={"error_type": type(error).__name__})
                self.stop.wait(backoff)
                backoff = min(backoff * 2, RECONNECT_WAIT_MAX)
