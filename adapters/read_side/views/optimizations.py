"""The optimizations read model's Postgres view (projections/optimizations.py): summaries, rounds and trials, and the corrected history while trials are invalid."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor
from psycopg.types.json import Jsonb

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.view import PostgresView, json_positions, with_json
from adapters.read_side.views.corrected_history import CORRECT_BEST, CORRECT_ROUNDS, CORRECT_TRIALS
from projections.optimizations import OptimizationsView, TrialRow, TrialTotals, later_totals


def jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


TRIAL_JSON = json_positions(TrialRow._fields, "candidate", "metrics", "extra")


class PostgresOptimizationsView(PostgresView, OptimizationsView):
    tables = """
    CREATE TABLE {schema}.optimizations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        name text NOT NULL,
        project text,
        dataset text,
        optimizer text,
        direction text,
        round_count integer NOT NULL DEFAULT 0,
        trial_count integer NOT NULL DEFAULT 0,
        best_score double precision,
        best_trial_index integer,
        best_candidate jsonb,
        stopped boolean NOT NULL DEFAULT false,
        stop_reason text,
        invalid_trials integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL
    );
    CREATE INDEX ON {schema}.optimizations (owner, created_at DESC, id);
    CREATE TABLE {schema}.rounds (
        optimization_id uuid NOT NULL,
        round_index integer NOT NULL,
        id uuid NOT NULL,
        first_trial_index integer NOT NULL,
        trial_count integer NOT NULL DEFAULT 0,
        trial_bytes bigint NOT NULL DEFAULT 0,  -- of its trials' entries: history pages are planned from it
        start_extras jsonb NOT NULL,
        end_extras jsonb,
        best_score double precision,
        best_candidate jsonb,
        best_so_far double precision,
        corrected_best_score double precision,  -- the corrected_* while the optimization has invalid trials
        corrected_best_candidate jsonb,
        corrected_best_so_far double precision,
        candidates jsonb,
        stop_reason text,
        stopped boolean NOT NULL DEFAULT false,
        started_at timestamptz NOT NULL,
        ended_at timestamptz,
        trials text,  -- an ended round's trial entries as one JSON array: a history page reads it whole
        PRIMARY KEY (optimization_id, round_index)
    );
    -- Kept uncompressed: a history page reads every ended round's array, and decompressing
    -- them costs more than reading them (100 x 100 trials: 13.5 ms of Postgres CPU with
    -- pglz, 9 without, and lz4 is not in every build).
    ALTER TABLE {schema}.rounds ALTER COLUMN trials SET STORAGE EXTERNAL;
    CREATE UNIQUE INDEX ON {schema}.rounds (id);
    CREATE TABLE {schema}.trials (
        optimization_id uuid NOT NULL,
        trial_index integer NOT NULL,
        id uuid NOT NULL,
        round_index integer NOT NULL,
        candidate_id text,
        candidate_kind text,
        candidate jsonb,
        score double precision,
        metrics jsonb NOT NULL,
        dataset text,
        extra jsonb NOT NULL,
        best_so_far double precision,
        improved boolean NOT NULL,
        invalid_reason text,  -- set while the trial is invalidated
        invalidated_at timestamptz,
        corrected_best_so_far double precision,  -- the running best over valid trials, while any is invalid
        corrected boolean NOT NULL DEFAULT false,  -- whether `entry` carries the corrected fields
        created_at timestamptz NOT NULL,
        entry text NOT NULL,  -- the trial in the history's shape, as JSON: a history page only joins them
        PRIMARY KEY (optimization_id, trial_index)
    );
    CREATE INDEX ON {schema}.trials (optimization_id, candidate_id);
    CREATE INDEX ON {schema}.trials (optimization_id, trial_index) WHERE improved
    """

    erasure = """
    DELETE FROM {schema}.trials WHERE optimization_id IN (SELECT id FROM {schema}.optimizations WHERE owner = %(owner)s);
    DELETE FROM {schema}.rounds WHERE optimization_id IN (SELECT id FROM {schema}.optimizations WHERE owner = %(owner)s);
    DELETE FROM {schema}.optimizations WHERE owner = %(owner)s
    """

    def __init__(self, schema: str, **options: Any):
        super().__init__(schema, **options)
        self.new_trials = Rows(self.copier("{schema}.trials", ", ".join(TrialRow._fields)))
        self.round_totals = Totals(later_totals, self._add_round_totals)
        self.optimization_totals = Totals(later_totals, self._add_optimization_totals)
        self.sinks = [self.new_trials, self.round_totals, self.optimization_totals]

    def add_optimization(self, optimization_id: UUID, owner: str, name: str, at: datetime) -> None:
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.optimizations (id, owner, name, created_at, updated_at) VALUES (%s, %s, %s, %s, %s)"
            ),
            (optimization_id, owner, name, at, at),
        )

    def rename_optimization(self, optimization_id: UUID, name: str) -> None:
        self.batch.execute(self.sql("UPDATE {schema}.optimizations SET name = %s WHERE id = %s"), (name, optimization_id))

    def describe_optimization(
        self, optimization_id: UUID, project: str | None, dataset: str | None, optimizer: str | None, direction: str
    ) -> None:
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET project = %s, dataset = %s, optimizer = %s, direction = %s"
                " WHERE id = %s"
            ),
            (project, dataset, optimizer, direction, optimization_id),
        )

    def start_round(
        self, optimization_id: UUID, round_index: int, round_id: UUID, first_trial_index: int,
        extras: dict[str, Any], best_so_far: float | None, at: datetime,
    ) -> None:
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.rounds (optimization_id, round_index, id, first_trial_index, start_extras,"
                " best_so_far, started_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ),
            (optimization_id, round_index, round_id, first_trial_index, Jsonb(extras), best_so_far, at),
        )
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET round_count = round_count + 1,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (at, optimization_id),
        )

    def add_trial(self, row: TrialRow) -> None:
        self.batch.append(self.new_trials, with_json(row, TRIAL_JSON))

    def count_trials(self, round_id: UUID, optimization_id: UUID, totals: TrialTotals) -> None:
        self.batch.accumulate(self.round_totals, round_id, totals)
        self.batch.accumulate(self.optimization_totals, optimization_id, totals)

    def set_trial_validity(
        self, optimization_id: UUID, trial_index: int, reason: str | None, counted: int, at: datetime
    ) -> None:
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.trials SET invalid_reason = %s, invalidated_at = %s"
                " WHERE optimization_id = %s AND trial_index = %s"
            ),
            (reason, at if reason is not None else None, optimization_id, trial_index),
        )
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET invalid_trials = invalid_trials + %s,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (counted, at, optimization_id),
        )
        self._correct(self.batch.cursor, optimization_id, changed=trial_index)

    def end_round(
        self, round_id: UUID, at: datetime, extras: dict[str, Any], best_score: float | None, best_candidate: Any,
        best_so_far: float | None, candidates: list[Any] | None, stop_reason: str | None,
    ) -> None:
        # An ended round takes no more trials: its entries are joined once, here (the
        # batch has written its trials and their count before this statement runs).
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.rounds r SET ended_at = %s, end_extras = %s, best_score = %s, best_candidate = %s,"
                " best_so_far = %s, candidates = %s, stop_reason = %s,"
                " trials = (SELECT '[' || coalesce(string_agg(t.entry, ',' ORDER BY t.trial_index), '') || ']'"
                "  FROM {schema}.trials t WHERE t.optimization_id = r.optimization_id"
                "  AND t.trial_index >= r.first_trial_index AND t.trial_index < r.first_trial_index + r.trial_count)"
                " WHERE id = %s"
            ),
            (at, Jsonb(extras), best_score, jsonb(best_candidate), best_so_far, jsonb(candidates), stop_reason, round_id),
        )

    def stamp_round_stop(self, round_id: UUID, reason: str) -> None:
        self.batch.execute(self.sql("UPDATE {schema}.rounds SET stop_reason = %s WHERE id = %s"), (reason, round_id))

    def stop_optimization(self, optimization_id: UUID, reason: str | None, at: datetime) -> None:
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET stopped = true, stop_reason = %s,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (reason, at, optimization_id),
        )
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.rounds SET stopped = true WHERE optimization_id = %(id)s AND round_index ="
                " (SELECT max(round_index) FROM {schema}.rounds WHERE optimization_id = %(id)s)"
            ),
            {"id": optimization_id},
        )

    def _add_round_totals(self, cur: Cursor[Any], items: list[tuple[Any, TrialTotals]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.rounds r SET trial_count = r.trial_count + d.added, best_so_far = d.best,"
                " trial_bytes = r.trial_bytes + d.bytes"
                " FROM unnest(%b::uuid[], %b::int[], %b::float8[], %b::int8[]) AS d(id, added, best, bytes)"
                " WHERE r.id = d.id"
            ),
            columns([(key, t.added, t.best_so_far, t.entry_bytes) for key, t in items], 4),
            prepare=True,
        )

    def _add_optimization_totals(self, cur: Cursor[Any], items: list[tuple[Any, TrialTotals]]) -> None:
        rows = [
            (key, t.added, t.best_so_far, t.improved_index, jsonb(t.improved_candidate), t.at) for key, t in items
        ]
        cur.execute(
            self.sql(
                "UPDATE {schema}.optimizations o SET trial_count = o.trial_count + d.added, best_score = d.best,"
                " best_trial_index = coalesce(d.improved_index, o.best_trial_index),"
                " best_candidate = CASE WHEN d.improved_index IS NULL THEN o.best_candidate ELSE d.candidate END,"
                " updated_at = greatest(o.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::int[], %b::float8[], %b::int[], %b::jsonb[], %b::timestamptz[])"
                " AS d(id, added, best, improved_index, candidate, at) WHERE o.id = d.id"
                " RETURNING o.id, o.invalid_trials"
            ),
            columns(rows, 6),
            prepare=True,
        )
        for optimization_id, invalid_trials in cur.fetchall():
            if invalid_trials:  # new trials of an optimization with invalid ones
                self._correct(cur, optimization_id, changed=-1)

    def _correct(self, cur: Cursor[Any], optimization_id: Any, changed: int) -> None:
        """Bring the optimization's corrected history up to date (CORRECT_TRIALS); `changed`
        is the trial whose validity changed (-1: none, only new trials)."""
        cur.execute(self.sql(CORRECT_TRIALS), {"id": optimization_id, "changed": changed}, prepare=True)
        rewritten = [index for (index,) in cur.fetchall()]
        if rewritten:
            cur.execute(self.sql(CORRECT_ROUNDS), {"id": optimization_id, "from": min(rewritten)}, prepare=True)
        cur.execute(self.sql(CORRECT_BEST), {"id": optimization_id}, prepare=True)
