"""The optimizations read model's Postgres view (projections/optimizations.py): summaries, rounds and trials, and the corrected history while trials are invalid.

What a user wrote (names, project, dataset, optimizer, stop and invalidation reasons,
extras, candidates, metrics, and the history entries made of them) is sealed under the
owner's key (adapters/read_side/sealing.py) and opened by the query that reads it; the
project and optimizer filters match blind terms (`field_term`). Ids, indices, scores,
best-so-far values, counts, directions and times stay in clear: the orders, the bests
and the page plans are computed on them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg import Cursor

from adapters.read_side.batch import Rows, Totals, columns
from adapters.read_side.sealing import Owners, UserSeal
from adapters.read_side.view import PostgresView
from adapters.read_side.views.corrected_history import (
    CHANGED_ROUNDS,
    CORRECT_BEST,
    CORRECT_ROUNDS,
    TrialState,
    corrected_entry,
    corrections,
)
from projections.optimizations import OptimizationsView, TrialRow, TrialTotals, later_totals
from services.ports.sealing import field_term

TRIAL_COLUMNS = (
    "optimization_id, trial_index, id, round_index, candidate_id, candidate_kind, candidate, score, metrics, dataset,"
    " extra, best_so_far, improved, created_at, entry"
)


class PostgresOptimizationsView(PostgresView, OptimizationsView):
    tables = """
    CREATE TABLE {schema}.optimizations (
        id uuid PRIMARY KEY,
        owner text NOT NULL,
        name bytea,  -- sealed, as every bytea here (NULL: the owner was erased before the row was written)
        project bytea,
        project_term text,  -- the project's blind term, which the list's filter matches
        dataset bytea,
        optimizer bytea,
        optimizer_term text,
        direction text,
        round_count integer NOT NULL DEFAULT 0,
        trial_count integer NOT NULL DEFAULT 0,
        best_score double precision,
        best_trial_index integer,
        best_candidate bytea,  -- the best trial's sealed candidate, copied
        stopped boolean NOT NULL DEFAULT false,
        stop_reason bytea,
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
        trial_bytes bigint NOT NULL DEFAULT 0,  -- of its trials' entries in clear: history pages are planned from it
        start_extras bytea,
        end_extras bytea,
        best_score double precision,
        best_candidate bytea,
        best_so_far double precision,
        corrected_best_score double precision,  -- the corrected_* while the optimization has invalid trials
        corrected_best_candidate bytea,
        corrected_best_so_far double precision,
        candidates bytea,
        stop_reason bytea,
        stopped boolean NOT NULL DEFAULT false,
        started_at timestamptz NOT NULL,
        ended_at timestamptz,
        trials bytea,  -- an ended round's trial entries as one JSON array, sealed: a history page opens it whole
        PRIMARY KEY (optimization_id, round_index)
    );
    -- Kept uncompressed: a history page reads every ended round's array (and sealed bytes
    -- do not compress).
    ALTER TABLE {schema}.rounds ALTER COLUMN trials SET STORAGE EXTERNAL;
    CREATE UNIQUE INDEX ON {schema}.rounds (id);
    CREATE TABLE {schema}.trials (
        optimization_id uuid NOT NULL,
        trial_index integer NOT NULL,
        id uuid NOT NULL,
        round_index integer NOT NULL,
        candidate_id text,
        candidate_kind text,
        candidate bytea,  -- the candidate's payload
        score double precision,
        metrics bytea,
        dataset bytea,
        extra bytea,
        best_so_far double precision,
        improved boolean NOT NULL,
        invalid_reason bytea,  -- set while the trial is invalidated
        invalidated_at timestamptz,
        corrected_best_so_far double precision,  -- the running best over valid trials, while any is invalid
        corrected boolean NOT NULL DEFAULT false,  -- whether `entry` carries the corrected fields
        created_at timestamptz NOT NULL,
        entry bytea,  -- the trial in the history's shape, as JSON: a history page only joins them
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
        self.owners = Owners(self.sql("SELECT id, owner FROM {schema}.optimizations WHERE id = ANY(%s)"))
        self._copy_trials = self.copier("{schema}.trials", TRIAL_COLUMNS)
        self.new_trials = Rows(self._write_trials)
        self.round_totals = Totals(later_totals, self._add_round_totals)
        self.optimization_totals = Totals(later_totals, self._add_optimization_totals)
        self.sinks = [self.new_trials, self.round_totals, self.optimization_totals]

    def _seal_of(self, optimization_id: UUID) -> UserSeal | None:
        """The optimization's owner's seal (None: erased, or no such optimization)."""
        self.batch.flush()
        owner = self.owners.of(self.batch.cursor, [optimization_id]).get(optimization_id)
        return self.seals.for_writing(owner) if owner is not None else None

    def add_optimization(self, optimization_id: UUID, owner: str, name: str, at: datetime) -> None:
        self.owners.remember(optimization_id, owner)
        seal = self.seals.for_writing(owner)
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.optimizations (id, owner, name, created_at, updated_at) VALUES (%s, %s, %s, %s, %s)"
            ),
            (optimization_id, owner, seal.seal(f"optimization:{optimization_id}:name", name) if seal else None, at, at),
        )

    def rename_optimization(self, optimization_id: UUID, name: str) -> None:
        seal = self._seal_of(optimization_id)
        sealed = seal.seal(f"optimization:{optimization_id}:name", name) if seal is not None else None
        self.batch.execute(self.sql("UPDATE {schema}.optimizations SET name = %s WHERE id = %s"), (sealed, optimization_id))

    def describe_optimization(
        self, optimization_id: UUID, project: str | None, dataset: str | None, optimizer: str | None, direction: str
    ) -> None:
        seal = self._seal_of(optimization_id)
        row = f"optimization:{optimization_id}:"
        values: list[Any] = []
        for field, value in (("project", project), ("dataset", dataset), ("optimizer", optimizer)):
            values.append(seal.seal(row + field, value) if seal is not None and value is not None else None)
            if field != "dataset":
                values.append(field_term(seal, field, value) if seal is not None and value is not None else None)
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET project = %s, project_term = %s, dataset = %s, optimizer = %s,"
                " optimizer_term = %s, direction = %s WHERE id = %s"
            ),
            (*values, direction, optimization_id),
        )

    def start_round(
        self, optimization_id: UUID, round_index: int, round_id: UUID, first_trial_index: int,
        extras: dict[str, Any], best_so_far: float | None, at: datetime,
    ) -> None:
        seal = self._seal_of(optimization_id)
        self.batch.execute(
            self.sql(
                "INSERT INTO {schema}.rounds (optimization_id, round_index, id, first_trial_index, start_extras,"
                " best_so_far, started_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ),
            (optimization_id, round_index, round_id, first_trial_index,
             seal.seal_json(f"round:{round_id}:start_extras", extras) if seal is not None else None, best_so_far, at),
        )
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET round_count = round_count + 1,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (at, optimization_id),
        )

    def add_trial(self, row: TrialRow) -> None:
        self.batch.append(self.new_trials, row)

    def _write_trials(self, cur: Cursor[Any], rows: list[TrialRow]) -> None:
        owners = self.owners.of(cur, {row.optimization_id for row in rows})
        seals = {ident: self.seals.for_writing(owner) for ident, owner in owners.items()}
        sealed_rows = []
        for row in rows:
            seal = seals.get(row.optimization_id)
            name = f"trial:{row.optimization_id}:{row.trial_index}:"
            if seal is None:
                sealed: tuple[Any, ...] = (None, None, None, None, None)
            else:
                sealed = (
                    seal.seal_json(name + "candidate", row.candidate) if row.candidate is not None else None,
                    seal.seal_json(name + "metrics", row.metrics),
                    seal.seal(name + "dataset", row.dataset) if row.dataset is not None else None,
                    seal.seal_json(name + "extra", row.extra),
                    seal.seal(name + "entry", row.entry),
                )
            candidate, metrics, dataset, extra, entry = sealed
            sealed_rows.append((
                row.optimization_id, row.trial_index, row.id, row.round_index, row.candidate_id, row.candidate_kind,
                candidate, row.score, metrics, dataset, extra, row.best_so_far, row.improved, row.created_at, entry,
            ))
        self._copy_trials(cur, sealed_rows)

    def count_trials(self, round_id: UUID, optimization_id: UUID, totals: TrialTotals) -> None:
        self.batch.accumulate(self.round_totals, round_id, totals)
        self.batch.accumulate(self.optimization_totals, optimization_id, totals)

    def set_trial_validity(
        self, optimization_id: UUID, trial_index: int, reason: str | None, counted: int, at: datetime
    ) -> None:
        seal = self._seal_of(optimization_id)
        sealed = (
            seal.seal(f"trial:{optimization_id}:{trial_index}:invalid_reason", reason)
            if seal is not None and reason is not None else None
        )
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.trials SET invalid_reason = %s, invalidated_at = %s"
                " WHERE optimization_id = %s AND trial_index = %s"
            ),
            (sealed, at if reason is not None else None, optimization_id, trial_index),
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
        # batch has written its trials and their count before this is read).
        self.batch.flush()
        cur = self.batch.cursor
        found = cur.execute(
            self.sql(
                "SELECT o.id, o.owner, r.first_trial_index, r.trial_count FROM {schema}.rounds r"
                " JOIN {schema}.optimizations o ON o.id = r.optimization_id WHERE r.id = %s"
            ),
            (round_id,),
        ).fetchone()
        if found is None:
            return
        optimization_id, owner, first, count = found
        seal = self.seals.for_writing(owner)
        if seal is None:  # (erased: its rows go)
            return
        entries = self._entries(cur, optimization_id, first, first + count)
        row = f"round:{round_id}:"
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.rounds SET ended_at = %s, end_extras = %s, best_score = %s, best_candidate = %s,"
                " best_so_far = %s, candidates = %s, stop_reason = %s, trials = %s WHERE id = %s"
            ),
            (
                at, seal.seal_json(row + "end_extras", extras), best_score,
                seal.seal_json(row + "best_candidate", best_candidate) if best_candidate is not None else None,
                best_so_far, seal.seal_json(row + "candidates", candidates) if candidates is not None else None,
                seal.seal(row + "stop_reason", stop_reason) if stop_reason is not None else None,
                seal.seal(row + "trials", joined(seal, entries)), round_id,
            ),
        )

    def _entries(self, cur: Cursor[Any], optimization_id: Any, start: int, end: int) -> list[tuple[int, bytes]]:
        """The sealed history entries of trials start <= index < end, in order."""
        return cur.execute(
            self.sql(
                "SELECT trial_index, entry FROM {schema}.trials WHERE optimization_id = %s AND trial_index >= %s"
                " AND trial_index < %s ORDER BY trial_index"
            ),
            (optimization_id, start, end),
            prepare=True,
        ).fetchall()

    def stamp_round_stop(self, round_id: UUID, reason: str) -> None:
        self.batch.flush()
        cur = self.batch.cursor
        found = cur.execute(
            self.sql("SELECT optimization_id FROM {schema}.rounds WHERE id = %s"), (round_id,)
        ).fetchone()
        seal = self._seal_of(found[0]) if found is not None else None
        sealed = seal.seal(f"round:{round_id}:stop_reason", reason) if seal is not None else None
        self.batch.execute(self.sql("UPDATE {schema}.rounds SET stop_reason = %s WHERE id = %s"), (sealed, round_id))

    def stop_optimization(self, optimization_id: UUID, reason: str | None, at: datetime) -> None:
        seal = self._seal_of(optimization_id)
        sealed = seal.seal(f"optimization:{optimization_id}:stop_reason", reason) if seal and reason is not None else None
        self.batch.execute(
            self.sql(
                "UPDATE {schema}.optimizations SET stopped = true, stop_reason = %s,"
                " updated_at = greatest(updated_at, %s) WHERE id = %s"
            ),
            (sealed, at, optimization_id),
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
        # The best candidate is the improving trial's, copied sealed as the trial holds it
        # (as CORRECT_BEST copies it): one set of bytes whichever path wrote it, so a
        # rebuild writes what the live table holds.
        rows = [(key, t.added, t.best_so_far, t.improved_index, t.at) for key, t in items]
        cur.execute(
            self.sql(
                "UPDATE {schema}.optimizations o SET trial_count = o.trial_count + d.added, best_score = d.best,"
                " best_trial_index = coalesce(d.improved_index, o.best_trial_index),"
                " best_candidate = CASE WHEN d.improved_index IS NULL THEN o.best_candidate ELSE"
                "  (SELECT t.candidate FROM {schema}.trials t WHERE t.optimization_id = o.id"
                "   AND t.trial_index = d.improved_index) END,"
                " updated_at = greatest(o.updated_at, d.at)"
                " FROM unnest(%b::uuid[], %b::int[], %b::float8[], %b::int[], %b::timestamptz[])"
                " AS d(id, added, best, improved_index, at) WHERE o.id = d.id"
                " RETURNING o.id, o.invalid_trials"
            ),
            columns(rows, 5),
            prepare=True,
        )
        for optimization_id, invalid_trials in cur.fetchall():
            if invalid_trials:  # new trials of an optimization with invalid ones
                self._correct(cur, optimization_id, changed=-1)

    def _correct(self, cur: Cursor[Any], optimization_id: Any, changed: int) -> None:
        """Bring the optimization's corrected history up to date (corrected_history.py);
        `changed` is the trial whose validity changed (-1: none, only new trials)."""
        found = cur.execute(
            self.sql("SELECT owner, direction, invalid_trials > 0 FROM {schema}.optimizations WHERE id = %s"),
            (optimization_id,),
        ).fetchone()
        seal = self.seals.for_writing(found[0]) if found is not None else None
        if found is None or seal is None:
            return
        _, direction, corrected = found
        states = [
            TrialState(*row) for row in cur.execute(
                self.sql(
                    "SELECT trial_index, score, invalid_reason IS NULL, corrected, corrected_best_so_far"
                    " FROM {schema}.trials WHERE optimization_id = %s ORDER BY trial_index"
                ),
                (optimization_id,),
                prepare=True,
            ).fetchall()
        ]
        rewrite = dict(corrections(states, direction, corrected, changed))
        if rewrite:
            self._rewrite_entries(cur, optimization_id, seal, corrected, rewrite)
            self._rejoin_rounds(cur, optimization_id, seal, min(rewrite))
            cur.execute(self.sql(CORRECT_ROUNDS), {"id": optimization_id, "from": min(rewrite)}, prepare=True)
        cur.execute(self.sql(CORRECT_BEST), {"id": optimization_id}, prepare=True)

    def _rewrite_entries(
        self, cur: Cursor[Any], optimization_id: Any, seal: UserSeal, corrected: bool, rewrite: dict[int, float | None]
    ) -> None:
        found = cur.execute(
            self.sql(
                "SELECT trial_index, entry, invalid_reason, invalidated_at FROM {schema}.trials"
                " WHERE optimization_id = %s AND trial_index = ANY(%s)"
            ),
            (optimization_id, list(rewrite)),
        ).fetchall()
        rows = []
        for index, entry, reason, at in found:
            text = corrected_entry(seal.open(entry) or "{}", corrected, rewrite[index], seal.open(reason), at)
            rows.append((index, rewrite[index], corrected, seal.seal(f"trial:{optimization_id}:{index}:entry", text)))
        cur.execute(
            self.sql(
                "UPDATE {schema}.trials t SET corrected_best_so_far = d.best, corrected = d.corrected, entry = d.entry"
                " FROM unnest(%b::int[], %b::float8[], %b::bool[], %b::bytea[]) AS d(trial_index, best, corrected, entry)"
                " WHERE t.optimization_id = %b AND t.trial_index = d.trial_index"
            ),
            [*columns(rows, 4), optimization_id],
            prepare=True,
        )

    def _rejoin_rounds(self, cur: Cursor[Any], optimization_id: Any, seal: UserSeal, start: int) -> None:
        """The rounds from trial `start` on: their entries' bytes counted again, and the
        ended ones' arrays joined again."""
        rounds = cur.execute(
            self.sql(
                "SELECT id, first_trial_index, trial_count, ended_at IS NOT NULL FROM {schema}.rounds r"
                " WHERE " + CHANGED_ROUNDS + " ORDER BY round_index"
            ),
            {"id": optimization_id, "from": start},
        ).fetchall()
        if not rounds:
            return
        first = rounds[0][1]
        entries = self._entries(cur, optimization_id, first, max(f + c for _, f, c, _ in rounds))
        by_index = dict(entries)
        rows = []
        for round_id, first_index, count, ended in rounds:
            mine = [(i, by_index[i]) for i in range(first_index, first_index + count) if i in by_index]
            opened = [seal.open(entry) or "" for _, entry in mine]
            size = sum(len(text.encode()) for text in opened)
            trials = seal.seal(f"round:{round_id}:trials", "[" + ",".join(opened) + "]") if ended else None
            rows.append((round_id, size, trials))
        cur.execute(
            self.sql(
                "UPDATE {schema}.rounds r SET trial_bytes = d.bytes, trials = d.trials"
                " FROM unnest(%b::uuid[], %b::int8[], %b::bytea[]) AS d(id, bytes, trials) WHERE r.id = d.id"
            ),
            columns(rows, 3),
            prepare=True,
        )


def joined(seal: UserSeal, entries: list[tuple[int, bytes]]) -> str:
    """Sealed entries opened and joined as one JSON array."""
    return "[" + ",".join(seal.open(entry) or "" for _, entry in entries) + "]"
