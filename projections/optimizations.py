"""Optimizations read model: each optimization's summary, its rounds and its trials."""

from __future__ import annotations

from typing import Any

import orjson
from psycopg import Cursor
from psycopg.types.json import Jsonb

from domain.optimization import OptimizationStarted, OptimizationStopped
from domain.round import Round
from domain.session import Session
from domain.trial import Trial
from projections.base import Projection, handles
from projections.batch import Batch, Rows, Totals, columns


def jsonb(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def trial_entry(e: Trial.Recorded) -> bytes:
    """The trial as optimizations.history shows it (contract_optimization.TrialEntry), as JSON."""
    return orjson.dumps(
        {
            "trial_index": e.trial_index,
            "score": e.score,
            "candidate": e.candidate.payload if e.candidate else None,
            "candidate_id": e.candidate.id if e.candidate else None,
            "metrics": e.metrics,
            "dataset": e.dataset,
            "extra": e.extras,
            "best_so_far": e.best_so_far,
            "timestamp": e.timestamp,
        }
    )


def later_totals(earlier: tuple[Any, ...], later: tuple[Any, ...]) -> tuple[Any, ...]:
    """Per optimization or round: (trials added, best so far, improving trial's index,
    its candidate, latest time, bytes of their history entries); the later batch's best
    wins, an improvement sticks."""
    improved = later[2] is not None
    return (
        earlier[0] + later[0],
        later[1],
        later[2] if improved else earlier[2],
        later[3] if improved else earlier[3],
        max(earlier[4], later[4]),
        earlier[5] + later[5],
    )


# Invalidated trials (domain/trial.py): while an optimization has any, its read model also
# holds the history without them. Each trial's corrected best so far is a running best over
# the valid trials; its history entry carries it (and, when invalid, why and since when);
# the ended rounds' entry arrays are joined again from where the first entry changed; each
# round's corrected best and the optimization's best are its valid trials'. With none
# invalid (again), the entries are as first recorded and the corrected columns are NULL.
CORRECT_TRIALS = """
WITH o AS (SELECT direction, invalid_trials > 0 AS corrected FROM {schema}.optimizations WHERE id = %(id)s),
running AS (
    SELECT t.trial_index, CASE WHEN o.corrected THEN CASE o.direction
        WHEN 'minimize' THEN min(t.score) FILTER (WHERE t.invalid_reason IS NULL) OVER w
        ELSE max(t.score) FILTER (WHERE t.invalid_reason IS NULL) OVER w END END AS best
    FROM {schema}.trials t CROSS JOIN o WHERE t.optimization_id = %(id)s
    WINDOW w AS (ORDER BY t.trial_index)
)
UPDATE {schema}.trials t SET corrected_best_so_far = running.best, corrected = o.corrected,
    entry = ((t.entry::jsonb - 'corrected_best_so_far' - 'invalid')
        || CASE WHEN o.corrected THEN jsonb_build_object('corrected_best_so_far', running.best) ELSE '{{}}' END
        || CASE WHEN t.invalid_reason IS NULL THEN '{{}}' ELSE jsonb_build_object(
            'invalid', jsonb_build_object('reason', t.invalid_reason, 'at', t.invalidated_at)) END)::text
FROM running CROSS JOIN o
WHERE t.optimization_id = %(id)s AND t.trial_index = running.trial_index
    AND (t.corrected <> o.corrected OR t.corrected_best_so_far IS DISTINCT FROM running.best
         OR t.trial_index = %(changed)s)
RETURNING t.trial_index
"""
ROUND_TRIALS = "t.optimization_id = r.optimization_id AND t.trial_index >= r.first_trial_index" \
    " AND t.trial_index < r.first_trial_index + r.trial_count"
BEST_VALID = "t.invalid_reason IS NULL AND t.score IS NOT NULL" \
    " ORDER BY CASE o.direction WHEN 'minimize' THEN t.score ELSE -t.score END, t.trial_index LIMIT 1"
CORRECT_ROUNDS = f"""
UPDATE {{schema}}.rounds r SET
    trials = CASE WHEN r.ended_at IS NOT NULL THEN (SELECT '[' || coalesce(string_agg(t.entry, ',' ORDER BY
        t.trial_index), '') || ']' FROM {{schema}}.trials t WHERE {ROUND_TRIALS}) END,
    trial_bytes = (SELECT coalesce(sum(octet_length(t.entry)), 0) FROM {{schema}}.trials t WHERE {ROUND_TRIALS}),
    (corrected_best_score, corrected_best_candidate) = (  -- no row (NULLs) with no invalid trial
        SELECT t.score, t.candidate FROM {{schema}}.trials t WHERE o.invalid_trials > 0 AND {ROUND_TRIALS} AND {BEST_VALID}),
    corrected_best_so_far = CASE WHEN o.invalid_trials > 0 THEN
        (SELECT t.corrected_best_so_far FROM {{schema}}.trials t WHERE t.optimization_id = r.optimization_id
         AND t.trial_index < r.first_trial_index + r.trial_count ORDER BY t.trial_index DESC LIMIT 1) END
FROM {{schema}}.optimizations o
WHERE o.id = %(id)s AND r.optimization_id = %(id)s
    AND (r.first_trial_index + r.trial_count > %(from)s OR r.first_trial_index >= %(from)s)
"""
CORRECT_BEST = f"""
UPDATE {{schema}}.optimizations o SET (best_score, best_trial_index, best_candidate) = (
    SELECT t.score, t.trial_index, t.candidate FROM {{schema}}.trials t WHERE t.optimization_id = o.id AND {BEST_VALID})
WHERE o.id = %(id)s
"""


class OptimizationsProjection(Projection):
    name = "optimizations"
    version = 5  # v5: invalidated trials
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

    def __init__(self, schema: str | None = None, **options: Any):
        super().__init__(schema, **options)
        self.new_trials = Rows(
            self.copier(
                "{schema}.trials",
                "optimization_id, trial_index, id, round_index, candidate_id, candidate_kind, candidate, score,"
                " metrics, dataset, extra, best_so_far, improved, created_at, entry",
            )
        )
        self.round_totals = Totals(later_totals, self._add_round_totals)
        self.optimization_totals = Totals(later_totals, self._add_optimization_totals)
        self.sinks = [self.new_trials, self.round_totals, self.optimization_totals]

    @handles(Session.Created)
    def session_created(self, batch: Batch, e: Session.Created, _: int) -> None:
        if e.kind == "optimization":
            batch.execute(
                self.sql(
                    "INSERT INTO {schema}.optimizations (id, owner, name, created_at, updated_at)"
                    " VALUES (%s, %s, %s, %s, %s)"
                ),
                (e.originator_id, e.owner, e.name, e.timestamp, e.timestamp),
            )

    @handles(Session.Renamed)
    def session_renamed(self, batch: Batch, e: Session.Renamed, _: int) -> None:
        batch.execute(self.sql("UPDATE {schema}.optimizations SET name = %s WHERE id = %s"), (e.name, e.originator_id))

    @handles(OptimizationStarted)
    def optimization_started(self, batch: Batch, e: OptimizationStarted, _: int) -> None:
        batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET project = %s, dataset = %s, optimizer = %s, direction = %s"
                " WHERE id = %s"
            ),
            (e.project, e.dataset, e.optimizer, e.direction, e.originator_id),
        )

    @handles(Round.Started)
    def round_started(self, batch: Batch, e: Round.Started, _: int) -> None:
        batch.execute(
            self.sql(
                "INSERT INTO {schema}.rounds (optimization_id, round_index, id, first_trial_index, start_extras,"
                " best_so_far, started_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ),
            (
                e.optimization_id,
                e.round_index,
                e.originator_id,
                e.first_trial_index,
                Jsonb(e.extras),
                e.best_so_far,
                e.timestamp,
            ),
        )
        batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET round_count = round_count + 1,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (e.timestamp, e.optimization_id),
        )

    @handles(Trial.Recorded)
    def trial_recorded(self, batch: Batch, e: Trial.Recorded, _: int) -> None:
        candidate = e.candidate
        entry = trial_entry(e)
        batch.append(
            self.new_trials,
            (
                e.optimization_id,
                e.trial_index,
                e.originator_id,
                e.round_index,
                candidate.id if candidate else None,
                candidate.kind if candidate else None,
                jsonb(candidate.payload) if candidate else None,
                e.score,
                Jsonb(e.metrics),
                e.dataset,
                Jsonb(e.extras),
                e.best_so_far,
                e.improved,
                e.timestamp,
                entry.decode(),
            ),
        )
        improved_index = e.trial_index if e.improved else None
        improved_candidate = candidate.payload if (candidate and e.improved) else None
        totals = (1, e.best_so_far, improved_index, improved_candidate, e.timestamp, len(entry))
        batch.accumulate(self.round_totals, e.round_id, totals)
        batch.accumulate(self.optimization_totals, e.optimization_id, totals)

    def _add_round_totals(self, cur: Cursor, items: list[tuple[Any, tuple[Any, ...]]]) -> None:
        cur.execute(
            self.sql(
                "UPDATE {schema}.rounds r SET trial_count = r.trial_count + d.added, best_so_far = d.best,"
                " trial_bytes = r.trial_bytes + d.bytes"
                " FROM unnest(%b::uuid[], %b::int[], %b::float8[], %b::int8[]) AS d(id, added, best, bytes)"
                " WHERE r.id = d.id"
            ),
            columns([(key, added, best, size) for key, (added, best, *_, size) in items], 4),
            prepare=True,
        )

    def _add_optimization_totals(self, cur: Cursor, items: list[tuple[Any, tuple[Any, ...]]]) -> None:
        rows = [
            (key, added, best, index, jsonb(candidate), at) for key, (added, best, index, candidate, at, _) in items
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

    def _correct(self, cur: Cursor, optimization_id: Any, changed: int) -> None:
        """Bring the optimization's corrected history up to date (CORRECT_TRIALS); `changed`
        is the trial whose validity changed (-1: none, only new trials)."""
        cur.execute(self.sql(CORRECT_TRIALS), {"id": optimization_id, "changed": changed}, prepare=True)
        rewritten = [index for (index,) in cur.fetchall()]
        if rewritten:
            cur.execute(self.sql(CORRECT_ROUNDS), {"id": optimization_id, "from": min(rewritten)}, prepare=True)
        cur.execute(self.sql(CORRECT_BEST), {"id": optimization_id}, prepare=True)

    @handles(Trial.Invalidated)
    def trial_invalidated(self, batch: Batch, e: Trial.Invalidated, _: int) -> None:
        self._validity(batch, e, e.reason, e.timestamp, 1)

    @handles(Trial.Restored)
    def trial_restored(self, batch: Batch, e: Trial.Restored, _: int) -> None:
        self._validity(batch, e, None, None, -1)

    def _validity(self, batch: Batch, e: Any, reason: str | None, at: Any, counted: int) -> None:
        batch.execute(
            self.sql(
                "UPDATE {schema}.trials SET invalid_reason = %s, invalidated_at = %s"
                " WHERE optimization_id = %s AND trial_index = %s"
            ),
            (reason, at, e.optimization_id, e.trial_index),
        )
        batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET invalid_trials = invalid_trials + %s,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (counted, e.timestamp, e.optimization_id),
        )
        self._correct(batch.cursor, e.optimization_id, changed=e.trial_index)

    @handles(Round.Ended)
    def round_ended(self, batch: Batch, e: Round.Ended, _: int) -> None:
        # An ended round takes no more trials: its entries are joined once, here (the
        # batch has written its trials and their count before this statement runs).
        batch.execute(
            self.sql(
                "UPDATE {schema}.rounds r SET ended_at = %s, end_extras = %s, best_score = %s, best_candidate = %s,"
                " best_so_far = %s, candidates = %s, stop_reason = %s,"
                " trials = (SELECT '[' || coalesce(string_agg(t.entry, ',' ORDER BY t.trial_index), '') || ']'"
                "  FROM {schema}.trials t WHERE t.optimization_id = r.optimization_id"
                "  AND t.trial_index >= r.first_trial_index AND t.trial_index < r.first_trial_index + r.trial_count)"
                " WHERE id = %s"
            ),
            (
                e.timestamp,
                Jsonb(e.extras),
                e.best_score,
                jsonb(e.best_candidate),
                e.best_so_far,
                jsonb(e.candidates),
                e.stop_reason,
                e.originator_id,
            ),
        )

    @handles(Round.StopStamped)
    def round_stop_stamped(self, batch: Batch, e: Round.StopStamped, _: int) -> None:
        batch.execute(self.sql("UPDATE {schema}.rounds SET stop_reason = %s WHERE id = %s"), (e.reason, e.originator_id))

    @handles(OptimizationStopped)
    def optimization_stopped(self, batch: Batch, e: OptimizationStopped, _: int) -> None:
        batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET stopped = true, stop_reason = %s,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (e.reason, e.timestamp, e.originator_id),
        )
        batch.execute(
            self.sql(
                "UPDATE {schema}.rounds SET stopped = true WHERE optimization_id = %(id)s AND round_index ="
                " (SELECT max(round_index) FROM {schema}.rounds WHERE optimization_id = %(id)s)"
            ),
            {"id": e.originator_id},
        )
