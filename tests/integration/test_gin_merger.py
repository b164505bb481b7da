"""The GIN merger merges the read models' pending lists from its own connection (a real Postgres)."""

from __future__ import annotations

import threading

from adapters.read_side.gin_merger import GinMerger
from adapters.store.postgres import PostgresTarget
from tests.waiting import wait_until

PENDING = "SELECT gin_clean_pending_list('rm_merged.docs_tsv_idx'::regclass)"


def test_what_inserts_leave_pending_is_merged_by_the_merger_alone(target: PostgresTarget) -> None:
    with target.connect(autocommit=True) as conn:
        conn.execute("CREATE SCHEMA rm_merged")
        conn.execute("CREATE TABLE rm_merged.docs (id int PRIMARY KEY, tsv tsvector NOT NULL)")
        conn.execute("CREATE INDEX docs_tsv_idx ON rm_merged.docs USING gin (tsv) WITH (gin_pending_list_limit = 4096)")
        conn.execute("CREATE SCHEMA rm_elsewhere")
        conn.execute("CREATE TABLE rm_elsewhere.docs (id int PRIMARY KEY, tsv tsvector NOT NULL)")
        conn.execute("CREATE INDEX elsewhere_tsv_idx ON rm_elsewhere.docs USING gin (tsv) WITH (gin_pending_list_limit = 4096)")
        for schema in ("rm_merged", "rm_elsewhere"):
            conn.execute(  # (well under the limit: the inserts leave every entry pending)
                f"INSERT INTO {schema}.docs SELECT n, to_tsvector('simple', 'word' || n || ' common' || (n % 7))"
                " FROM generate_series(1, 2000) n"
            )
    stop = threading.Event()
    merger = GinMerger(target, ["rm_merged"], stop, every=0.05)
    merger.thread.start()
    try:
        wait_until(lambda: merger.merged_pages > 0, "the merger to merge the pending list")
    finally:
        stop.set()
        merger.thread.join(timeout=5)
    with target.connect(autocommit=True) as conn:
        assert conn.execute(PENDING).fetchone() == (0,)  # nothing left pending
        # A schema not named is left alone: its list is still there to merge.
        left = conn.execute("SELECT gin_clean_pending_list('rm_elsewhere.elsewhere_tsv_idx'::regclass)").fetchone()
        assert left is not None and left[0] > 0
        assert conn.execute("SELECT count(*) FROM rm_merged.docs WHERE tsv @@ 'word1500'::tsquery").fetchone() == (1,)
