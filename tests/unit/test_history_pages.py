"""How history pages are planned (service) and followed (client), without I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import pytest
from chronicle_client.optimizations import Optimizations
from chronicle_contract.optimizations import HistoryPage, PlannedPage, RoundEntry, TrialEntry

from services.optimizations import queries as optimization_queries

KIB = 1024


def sizes(*kib: int, trials: int = 10) -> list[dict[str, Any]]:
    return [{"round_index": n, "trial_count": trials, "size": size * KIB} for n, size in enumerate(kib)]


def test_pages_are_cut_by_bytes_and_stop_before_a_round_too_big_for_one_reply() -> None:
    assert optimization_queries.REPLY_BUDGET == 768 * KIB
    assert optimization_queries.plan_pages(sizes(300, 300, 300, 100, 900, 10), -1, 2_000) == [(-1, 1), (1, 3)]
    assert optimization_queries.plan_pages(sizes(900, 10), -1, 2_000) == [], "a huge first round comes in parts, unplanned"
    assert optimization_queries.plan_pages(sizes(10, 10, 10), 4, 2_000) == [(4, 2)], "cursors carry on from where the page starts"
    assert optimization_queries.plan_pages(sizes(50, 50, 300, 300), -1, 2_000, first_budget=96 * KIB) == [(-1, 0), (0, 3)]


def test_pages_hold_at_most_max_trials_but_always_one_round_and_only_so_many_are_planned() -> None:
    assert optimization_queries.plan_pages(sizes(1, 1, 1, 1, trials=600), -1, 1_000) == [(-1, 1), (1, 3)]
    assert optimization_queries.plan_pages(sizes(1, 1, trials=5_000), -1, 1_000) == [(-1, 0), (0, 1)]
    many = optimization_queries.plan_pages(sizes(*[500] * 40), -1, 2_000)
    assert len(many) == optimization_queries.PAGES_PLANNED_AHEAD + 1 and many[:2] == [(-1, 0), (0, 1)]


def entry(index: int) -> RoundEntry:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    return RoundEntry(
        round_index=index, round_id=uuid4(), trials=[], candidates=[], best_score=None, best_candidate=None,
        stop_reason=None, stopped=False, best_so_far=None, timestamp=at, ended_at=at, extra={},
    )


class CannedPages(Optimizations):
    """The service's replies by cursor (after_round, until_round)."""

    def __init__(self, replies: dict[tuple[int | None, int | None], HistoryPage]):
        self.replies = replies
        self.asked: list[tuple[int | None, int | None]] = []

    async def history_page_json(self, optimization_id: UUID, **fields: Any) -> dict[str, Any]:
        cursor = (fields.get("after_round"), fields.get("until_round"))
        self.asked.append(cursor)
        return self.replies[cursor].model_dump(mode="json")  # as the wire carries it


def page(rounds: list[int], next_after_round: int | None, planned: tuple[tuple[int, int], ...] = ()) -> HistoryPage:
    return HistoryPage(
        optimization_id=uuid4(), direction="maximize", rounds=[entry(n) for n in rounds],
        next_after_round=next_after_round, planned=[PlannedPage(after_round=a, until_round=u) for a, u in planned],
    )


@pytest.mark.parametrize("changed", [False, True])
async def test_the_client_fetches_planned_pages_and_goes_on_from_what_agrees(changed: bool) -> None:
    replies = {
        (None, None): page([0, 1], 1, ((1, 3), (3, 5))),
        (1, 3): page([2] if changed else [2, 3], 2 if changed else 3),  # changed: round 3 grew too big meanwhile
        (3, 5): page([4, 5], None),
        (2, None): page([3, 4, 5], None),
    }
    api = CannedPages(replies)
    rounds = await api.history(uuid4())
    assert [r["round_index"] for r in rounds] == [0, 1, 2, 3, 4, 5]
    assert api.asked == [(None, None), (1, 3), (3, 5), *([(2, None)] if changed else [])]


async def test_a_round_in_parts_is_joined_and_read_as_entries_shapes_it() -> None:
    trial: dict[str, Any] = {"score": 0.5, "candidate": {"x": 1}, "candidate_id": "c", "metrics": {}, "dataset": None, "extra": {},
             "best_so_far": 0.5, "timestamp": datetime(2026, 3, 1, 12, 30, tzinfo=UTC)}
    first_part, last_part = entry(7), entry(7)
    first_part.complete, first_part.trials = False, [TrialEntry(trial_index=0, **trial)]
    last_part.trials = [TrialEntry(trial_index=1, **trial)]
    first = page([], 7)
    first.rounds, first.next_after_trial = [first_part], 0
    last = page([], None)
    last.rounds = [last_part]
    api = CannedPages({(None, None): first, (7, None): last})

    [joined] = await api.history(uuid4())
    assert [t["trial_index"] for t in joined["trials"]] == [0, 1]
    assert "complete" not in joined, "a paging mark, not part of the normalized shape"
    assert joined["round_id"] == last_part.round_id and joined["ended_at"] == datetime(2026, 3, 1, tzinfo=UTC)
    assert joined["trials"][1]["timestamp"] == datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
