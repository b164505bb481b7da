"""How the projection engine shares read models out over its threads."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

from adapters.read_side.engine import share_out
from adapters.read_side.tail import Runner


def runner(name: str, weight: int) -> Runner:
    # share_out reads only a runner's projection's name and weight: a namespace with those
    # stands in for a runner, whose batcher would need a database.
    return cast(Runner, SimpleNamespace(projection=SimpleNamespace(name=name, weight=weight)))


def names(groups: list[list[Runner]]) -> list[list[str]]:
    return [[r.projection.name for r in group] for group in groups]


def test_heavy_read_models_land_in_different_threads_in_declaration_order() -> None:
    runners = [runner("history", 3), runner("stats", 2), runner("search", 3), runner("hitl", 1), runner("audit", 1)]
    assert names(share_out(runners, 2)) == [["history", "stats"], ["search", "hitl", "audit"]]


def test_one_thread_takes_everything_and_threads_never_outnumber_read_models() -> None:
    runners = [runner("a", 1), runner("b", 5)]
    assert names(share_out(runners, 1)) == [["a", "b"]]
    assert names(share_out(runners, 8)) == [["b"], ["a"]]  # the heaviest goes first
