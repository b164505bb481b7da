"""The optimizations read model's corrected history: the SQL that keeps it while trials are invalid."""

from __future__ import annotations

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
