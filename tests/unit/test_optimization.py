"""Optimization rules without I/O: numbering, best-so-far, stops, candidates, Pareto fronts."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from uuid import uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.errors import Conflict, InvalidCommand
from domain.optimization import dominates, improves, pareto_front
from domain.round import Round
from domain.session import Session
from domain.trial import Trial, candidate_id_for, candidate_kind, make_candidate

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def optimization(direction: str = "maximize") -> Session:
    session = Session.create(id=uuid4(), owner="alice", at=NOW, name="opt", kind="optimization")
    session.start_optimization(at=NOW, project=None, dataset=None, optimizer="random", direction=direction)  # type: ignore[arg-type]
    return session


def next_round(session: Session, previous: Round | None = None) -> Round:
    round_id = uuid4()
    index = session.open_round(at=NOW, round_id=round_id, round_index=None)
    return Round.start(
        id=round_id, owner="alice", at=NOW, optimization_id=session.id, round_index=index,
        direction=session.optimization.direction, previous=previous, extras={},  # type: ignore[union-attr]
    )


def end(round: Round) -> None:
    round.end(at=NOW, best_score=None, best_candidate=None, stop_reason=None, candidates=None, extras={})


@pytest.mark.parametrize(
    ("direction", "scores", "bests"),
    [
        ("maximize", [1.0, None, 3.0, 2.0], [1.0, 1.0, 3.0, 3.0]),
        ("minimize", [None, 5.0, 7.0, 4.0], [None, 5.0, 5.0, 4.0]),
    ],
)
def test_best_so_far_follows_the_direction(direction: str, scores: list, bests: list) -> None:
    round = next_round(optimization(direction))
    stamped = [round.attach_trial(at=NOW, trial_id=uuid4(), score=s) for s in scores]
    assert [e.trial_index for e in stamped] == [0, 1, 2, 3]
    assert [e.best_so_far for e in stamped] == bests


def test_trial_indices_run_on_across_rounds_and_best_so_far_carries() -> None:
    session = optimization()
    first = next_round(session)
    for score in (0.5, 0.9):
        first.attach_trial(at=NOW, trial_id=uuid4(), score=score)
    end(first)
    second = next_round(session, first)
    assert (second.round_index, second.first_trial_index, second.best_so_far) == (1, 2, 0.9)
    assert second.attach_trial(at=NOW, trial_id=uuid4(), score=0.1).best_so_far == 0.9


def test_a_round_starts_only_after_the_previous_ended_and_refuses_trials_after_its_end() -> None:
    session = optimization()
    first = next_round(session)
    with pytest.raises(Conflict) as open_round:
        next_round(session, first)
    assert open_round.value.rule == "previous_round_ended"
    end(first)
    with pytest.raises(Conflict) as ended:
        first.attach_trial(at=NOW, trial_id=uuid4(), score=1.0)
    assert ended.value.field == "round_id"


def test_round_indices_are_never_reused() -> None:
    session = optimization()
    assert session.open_round(at=NOW, round_id=uuid4(), round_index=3) == 3
    assert session.open_round(at=NOW, round_id=uuid4(), round_index=None) == 4
    with pytest.raises(Conflict) as taken:
        session.open_round(at=NOW, round_id=uuid4(), round_index=2)
    assert taken.value.field == "round_index" and taken.value.context == {"next_round_index": 5}


def test_stop_ends_an_open_round_or_stamps_an_ended_one_without_a_reason() -> None:
    session = optimization()
    open_round = next_round(session)
    open_round.stamp_stop(at=NOW, reason="budget", best_candidate=None)
    assert open_round.ended and open_round.stop_reason == "budget"
    ended_with_reason = next_round(session, open_round)
    ended_with_reason.end(at=NOW, best_score=None, best_candidate=None, stop_reason="converged", candidates=None, extras={})
    ended_with_reason.stamp_stop(at=NOW, reason="later", best_candidate=None)
    assert ended_with_reason.stop_reason == "converged"
    session.stop_optimization(at=NOW, reason="budget")
    with pytest.raises(Conflict) as stopped:
        session.open_round(at=NOW, round_id=uuid4(), round_index=None)
    assert stopped.value.context == {"stop_reason": "budget"}


def test_a_plain_session_is_not_an_optimization() -> None:
    plain = Session.create(id=uuid4(), owner="alice", at=NOW, name="notes")
    with pytest.raises(InvalidCommand) as refused:
        plain.open_round(at=NOW, round_id=uuid4(), round_index=None)
    assert (refused.value.field, refused.value.rule) == ("optimization_id", "kind_optimization")


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, "chat"),
        ({"planner": "plan", "critic": "judge"}, "prompts"),
        ({"tools": [{"name": "search"}]}, "tools"),
        ({"temperature": 0.2, "top_k": 40, "greedy": False}, "parameters"),
        ("a prompt", "text"),
        ([1, 2], "other"),
    ],
)
def test_candidate_kinds(payload: object, kind: str) -> None:
    assert candidate_kind(payload) == kind


def test_candidate_ids_are_stable_and_lineage_comes_from_extras() -> None:
    assert candidate_id_for({"b": 1, "a": 2}) == candidate_id_for({"a": 2, "b": 1})
    assert candidate_id_for({"id": "mine", "x": 1}) == "mine"
    candidate = make_candidate({"x": 1}, None, {"parents": ["p1", "p1", "p2"], "origin": "crossover", "ops": ["swap"]})
    assert candidate is not None and candidate.parents == ("p1", "p2") and candidate.origin == "crossover"
    assert make_candidate(None, None, {"parents": ["p1"]}) is None
    with pytest.raises(InvalidCommand) as bad:
        make_candidate({"x": 1}, None, {"parents": [1]})
    assert bad.value.field == "extras.parents"


objective_vectors = st.lists(
    st.tuples(st.integers(-5, 5).map(float), st.integers(-5, 5).map(float)), min_size=0, max_size=40
)


@given(objective_vectors, st.sampled_from(["maximize", "minimize"]))
def test_pareto_front_is_exactly_the_undominated_points(vectors: list, second: str) -> None:
    directions = ("maximize", second)
    front = set(pareto_front(list(enumerate(vectors)), directions))  # type: ignore[arg-type]
    oriented = [(a, b if second == "maximize" else -b) for a, b in vectors]
    for i, point in enumerate(oriented):
        dominated = any(dominates(other, point) for other in oriented)
        assert (i in front) == (not dominated), (i, vectors)


def test_improves_treats_no_score_as_never_better() -> None:
    assert improves("maximize", 1.0, None) and not improves("maximize", None, 1.0)
    assert improves("minimize", 0.5, 1.0) and not improves("minimize", 1.0, 1.0)


@given(
    st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3)), max_size=40),
    st.sampled_from(["maximize", "minimize"]),
    st.sampled_from(["maximize", "minimize"]),
)
def test_the_two_objective_sweep_finds_what_pairwise_comparison_finds(
    values: list[tuple[int, int]], first: str, second: str
) -> None:
    points = [(n, (float(a), float(b))) for n, (a, b) in enumerate(values)]
    directions = (first, second)
    signs = tuple(1.0 if d == "maximize" else -1.0 for d in directions)
    expected = [
        key for key, mine in points
        if not any(dominates(tuple(s * v for s, v in zip(signs, other, strict=True)),
                             tuple(s * v for s, v in zip(signs, mine, strict=True))) for _, other in points)
    ]
    assert pareto_front(points, directions) == expected  # type: ignore[arg-type]
    one = pareto_front([(key, v[:1]) for key, v in points], directions[:1])  # type: ignore[arg-type]
    best = max((signs[0] * v[0] for _, v in points), default=None)
    assert one == [key for key, v in points if signs[0] * v[0] == best]


@given(
    st.integers(3, 6).flatmap(lambda d: st.tuples(
        st.lists(st.tuples(*[st.integers(-2, 2).map(float)] * d), max_size=60),
        st.tuples(*[st.sampled_from(["maximize", "minimize"])] * d),
    ))
)
def test_the_many_objective_front_is_what_pairwise_comparison_finds(case: tuple[list, tuple]) -> None:
    """The bit-set front against every pair compared, on few distinct values (many ties
    and equal points) in three to six objectives."""
    vectors, directions = case
    signs = tuple(1.0 if d == "maximize" else -1.0 for d in directions)
    oriented = [tuple(s * v for s, v in zip(signs, vector, strict=True)) for vector in vectors]
    expected = [n for n, mine in enumerate(oriented) if not any(dominates(other, mine) for other in oriented)]
    assert pareto_front(list(enumerate(vectors)), directions) == expected


def test_sixteen_objectives_in_general_position_leave_nearly_every_point_on_the_front() -> None:
    """The case that cost n x front comparisons (2,000 x 16 took 4 s): here the same answer
    as every pair compared, on a sample small enough for that to be quick."""
    rng = random.Random(29)
    vectors = [tuple(rng.random() for _ in range(16)) for _ in range(300)]
    expected = [n for n, mine in enumerate(vectors) if not any(dominates(other, mine) for other in vectors)]
    assert pareto_front(list(enumerate(vectors)), ("maximize",) * 16) == expected
    assert len(expected) > 250


def test_a_trial_is_invalidated_with_a_reason_once_and_restored_once() -> None:
    r = next_round(optimization())
    numbered = r.attach_trial(at=NOW, trial_id=uuid4(), score=0.9)
    trial = Trial.record(
        id=uuid4(), owner="alice", at=NOW, optimization_id=r.optimization_id, round_id=r.id, round_index=0,
        numbered=numbered, candidate=None, metrics={}, dataset=None, extras={}, previous_best=None,
    )
    with pytest.raises(InvalidCommand):
        trial.invalidate(at=NOW, reason=" ", by="u")
    with pytest.raises(Conflict):
        trial.restore(at=NOW, by="u")
    trial.invalidate(at=NOW, reason="leaked test set", by="auditor-1")
    with pytest.raises(Conflict):
        trial.invalidate(at=NOW, reason="again", by="u")
    assert trial.invalid_reason == "leaked test set"
    trial.restore(at=NOW, by="u")
    events = trial.collect_events()
    assert [type(e).__name__ for e in events] == ["Recorded", "Invalidated", "Restored"]
    invalidated = events[1]
    assert isinstance(invalidated, Trial.Invalidated)
    assert (invalidated.by, invalidated.trial_index, invalidated.optimization_id) == ("auditor-1", 0, r.optimization_id)
    assert trial.invalid_reason is None
