"""ANALYZE keeps no statistics on read-model content: pg_stats' most common values once
showed an erased user's words (`rm_optimizations.trials.extra`), beyond any erasure (issue 30)."""

from __future__ import annotations

import uuid

import psycopg
from psycopg.sql import SQL, Identifier

from adapters.read_side.view import no_statistics_on_content
from entrypoints.bootstrap import Chronicle
from tests.conftest import ClientFactory

STATS_OF = "SELECT attname::text FROM pg_stats WHERE schemaname = %s AND tablename = %s AND attname = ANY(%s)"
CONTENT = ("extra", "candidate")


def analyzed_stats(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE rm_optimizations.trials")
        return [name for (name,) in conn.execute(STATS_OF, ("rm_optimizations", "trials", list(CONTENT)))]


async def test_analyze_gathers_nothing_on_content_columns_and_earlier_statistics_are_removed(
    chronicle: Chronicle, connect: ClientFactory
) -> None:
    canary = f"CANARY-{uuid.uuid4().hex}"
    client = await connect()
    state = client.optimization(name="stats", optimizer="grid")
    round = await state.start_round()
    for i in range(20):  # one value, many times: a most common value, were it gathered
        await state.record_trial(round, candidate={"prompt": canary}, score=float(i), extra={"note": canary})
    await client.optimizations.history(await state.start())
    url = chronicle.settings.database_url or ""

    assert analyzed_stats(url) == []
    with psycopg.connect(url, autocommit=True) as conn:
        kept = conn.execute(STATS_OF, ("rm_optimizations", "trials", ["optimization_id", "trial_index"])).fetchall()
    assert len(kept) == 2  # (ids and numbers keep theirs: the planner needs them, they are not content)

    # A read model built by an earlier version has them: the engine's start takes them away.
    with psycopg.connect(url, autocommit=True) as conn:
        for column in CONTENT:
            conn.execute(SQL("ALTER TABLE rm_optimizations.trials ALTER COLUMN {} SET STATISTICS -1").format(Identifier(column)))
    assert sorted(analyzed_stats(url)) == sorted(CONTENT)
    with psycopg.connect(url, autocommit=True) as conn:
        # (Sealed, each row's bytes its own: even gathered, they quote nothing and repeat nothing.)
        gathered = conn.execute(
            "SELECT attname::text, most_common_vals::text, histogram_bounds::text FROM pg_stats"
            " WHERE schemaname = 'rm_optimizations' AND tablename = 'trials' AND attname = ANY(%s)",
            (list(CONTENT),),
        ).fetchall()
        assert gathered and not any(canary in str(row) for row in gathered)
        assert all(common is None for _, common, _ in gathered), gathered
        no_statistics_on_content(conn, "rm_optimizations")
        assert conn.execute(STATS_OF, ("rm_optimizations", "trials", list(CONTENT))).fetchall() == []
    assert analyzed_stats(url) == []
