"""The optimizations read model's corrected history: what keeps it while trials are invalid.

Invalidated trials (domain/trial.py): while an optimization has any, its read model also
holds the history without them. Each trial's corrected best so far is a running best over
the valid trials; its history entry carries it (and, when invalid, why and since when);
the ended rounds' entry arrays are joined again from where the first entry changed; each
round's corrected best and the optimization's best are its valid trials'. With none
invalid (again), the entries are as first recorded and the corrected columns are NULL.

Entries are sealed under the owner's key, so they are rewritten in Python once opened
(`corrected_entries`); the bests are chosen in SQL on clear scores, and a best candidate is
the chosen trial's sealed candidate, copied as it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, NamedTuple

import orjson


class TrialState(NamedTuple):
    """What a correction needs of a trial before its entry is opened."""

    trial_index: int
    score: float | None
    valid: bool
    corrected: bool  # whether its entry carries the corrected fields
    corrected_best_so_far: float | None


def corrections(
    trials: list[TrialState], direction: str | None, corrected: bool, changed: int
) -> Iterator[tuple[int, float | None]]:
    """(trial index, corrected best so far) of each trial whose entry must be rewritten, in
    trial order: the running best over valid trials (None when nothing is corrected)."""
    pick = min if direction == "minimize" else max
    best: float | None = None
    for trial in trials:
        if corrected and trial.valid and trial.score is not None:
            best = trial.score if best is None else pick(best, trial.score)
        running = best if corrected else None
        if trial.corrected != corrected or trial.corrected_best_so_far != running or trial.trial_index == changed:
            yield trial.trial_index, running


def corrected_entry(
    entry: str, corrected: bool, best_so_far: float | None, invalid_reason: str | None, invalidated_at: datetime | None
) -> str:
    """The entry as recorded, with the corrected best so far (while corrected) and why and
    since when the trial is invalid (while it is)."""
    fields: dict[str, Any] = orjson.loads(entry)
    fields.pop("corrected_best_so_far", None)
    fields.pop("invalid", None)
    if corrected:
        fields["corrected_best_so_far"] = best_so_far
    if invalid_reason is not None:
        fields["invalid"] = {"reason": invalid_reason, "at": invalidated_at}
    return orjson.dumps(fields).decode()


ROUND_TRIALS = "t.optimization_id = r.optimization_id AND t.trial_index >= r.first_trial_index" \
    " AND t.trial_index < r.first_trial_index + r.trial_count"
BEST_VALID = "t.invalid_reason IS NULL AND t.score IS NOT NULL" \
    " ORDER BY CASE o.direction WHEN 'minimize' THEN t.score ELSE -t.score END, t.trial_index LIMIT 1"
# The rounds from the first changed trial on (their entry arrays are joined again beside this).
CHANGED_ROUNDS = "r.optimization_id = %(id)s AND (r.first_trial_index + r.trial_count > %(from)s" \
    " OR r.first_trial_index >= %(from)s)"
CORRECT_ROUNDS = f"""
UPDATE {{schema}}.rounds r SET
    (corrected_best_score, corrected_best_candidate) = (  -- no row (NULLs) with no invalid trial
        SELECT t.score, t.candidate FROM {{schema}}.trials t WHERE o.invalid_trials > 0 AND {ROUND_TRIALS} AND {BEST_VALID}),
    corrected_best_so_far = CASE WHEN o.invalid_trials > 0 THEN
        (SELECT t.corrected_best_so_far FROM {{schema}}.trials t WHERE t.optimization_id = r.optimization_id
         AND t.trial_index < r.first_trial_index + r.trial_count ORDER BY t.trial_index DESC LIMIT 1) END
FROM {{schema}}.optimizations o
WHERE o.id = %(id)s AND {CHANGED_ROUNDS}
"""
CORRECT_BEST = f"""
UPDATE {{schema}}.optimizations o SET (best_score, best_trial_index, best_candidate) = (
    SELECT t.score, t.trial_index, t.candidate FROM {{schema}}.trials t WHERE t.optimization_id = o.id AND {BEST_VALID})
WHERE o.id = %(id)s
"""
