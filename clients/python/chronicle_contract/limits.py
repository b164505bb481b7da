"""Fair share: the per-user budgets a request draws on, by its action.

Every request draws on `requests`; searches, exports and the queries whose work grows
with the data (pareto fronts, lineage walks) draw on their own smaller budget as well.
The defaults are seed 001's (100 requests, 10 searches, 5 exports a minute per user);
a token with the `bulk` role (an optimizer, a pipeline) gets `bulk_factor` times each.
"""

from __future__ import annotations

BULK_ROLE = "bulk"
HEAVY_ACTIONS = frozenset({"optimizations.pareto", "artifacts.lineage", "candidates.lineage", "artifacts.by_example"})


def budgets_of(action: str) -> tuple[str, ...]:
    """The budgets a request with this action (e.g. `conversations.search`) draws on."""
    if action.endswith(".search"):
        return ("requests", "search")
    if action.endswith(".export"):
        return ("requests", "export")
    if action in HEAVY_ACTIONS:
        return ("requests", "heavy")
    return ("requests",)
