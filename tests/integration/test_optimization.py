"""Optimization history over NATS: rounds, trials, candidates, stamped by Chronicle."""

from __future__ import annotations

import asyncio
import copy
import random
import uuid
from typing import Any

import pytest
from chronicle_client import ChronicleClient, ChronicleError
from chronicle_client import optimizations as client_optimization
from chronicle_contract.optimizations import TrialEntry

from adapters.read_side.rebuild import rebuild
from adapters.read_side.views import read_model_of
from domain.optimization import Direction, pareto_front
from entrypoints.bootstrap import Chronicle
from projections.lineage import LineageProjection
from projections.optimizations import OptimizationsProjection
from services.optimizations import queries as queries_optimization
from services.optimizations.queries import MAX_PARETO_TRIALS_MANY_OBJECTIVES
from tests.conftest import ClientFactory

ROUND_KEYS = {
    "round_index", "trials", "candidates", "best_score", "best_candidate", "stop_reason", "stopped",
    "best_so_far", "timestamp", "extra",
}
TRIAL_KEYS = {"trial_index", "score", "candidate", "metrics", "dataset", "extra", "timestamp"}


def id_of(state: client_optimization.OptimizationState) -> uuid.UUID:
    """The id of an optimization that has started (its first round starts it)."""
    assert state.optimization_id is not None, "the optimization has not started"
    return state.optimization_id


def params(x: float, y: float) -> dict[str, float]:
    return {"x": x, "y": y}


async def test_rounds_and_trials_are_stamped_in_order(client: ChronicleClient) -> None:
    state = client.optimization(name="grid", optimizer="random_search", direction="maximize", project="p1")
    first = await state.start_round(extras={"population": 3})
    scores = [0.2, 0.5, 0.4]
    recorded = [await state.record_trial(first, candidate=params(i, i), score=s) for i, s in enumerate(scores)]
    assert [t.trial_index for t in recorded] == [0, 1, 2]
    assert [t.best_so_far for t in recorded] == [0.2, 0.5, 0.5]
    ended = await state.end_round(first, extras={"selection_meta": {"kept": 1}})
    assert (ended.best_score, ended.best_candidate) == (0.5, params(1, 1))

    second = await state.start_round()
    assert (second.round_index, second.first_trial_index) == (1, 3)
    more = [await state.record_trial(second, candidate=params(9, i), score=s) for i, s in enumerate([0.1, 0.7])]
    assert [(t.trial_index, t.best_so_far) for t in more] == [(3, 0.5), (4, 0.7)]
    await state.finalize_stop("budget exhausted")

    history = await state.history()
    assert [r["round_index"] for r in history] == [0, 1]
    assert [[t["trial_index"] for t in r["trials"]] for r in history] == [[0, 1, 2], [3, 4]]
    assert [r["best_so_far"] for r in history] == [0.5, 0.7]
    assert [(r["stopped"], r["stop_reason"]) for r in history] == [(False, None), (True, "budget exhausted")]
    assert history[1]["best_score"] == 0.7 and history[1]["best_candidate"] == params(9, 1)
    assert history[0]["extra"] == {"population": 3, "selection_meta": {"kept": 1}}
    assert state.entries() == history, "what the helper recorded is what the service gives back"

    summary = await client.optimizations.get(id_of(state))
    assert (summary.rounds, summary.trials, summary.best_score, summary.best_trial_index) == (2, 5, 0.7, 4)
    assert summary.best_candidate == params(9, 1) and summary.stopped and summary.stop_reason == "budget exhausted"


async def test_minimize_keeps_the_lowest_score_and_skips_unscored_trials(client: ChronicleClient) -> None:
    state = client.optimization(name="loss", optimizer="meta_prompt", direction="minimize")
    round = await state.start_round()
    bests = [(await state.record_trial(round, candidate=f"prompt {n}", score=s)).best_so_far
             for n, s in enumerate([3.0, None, 5.0, 1.5, 2.0])]
    assert bests == [3.0, 3.0, 3.0, 1.5, 1.5]
    ended = await state.end_round(round)
    assert (ended.best_score, ended.best_candidate) == (1.5, "prompt 3")
    summary = await client.optimizations.get(id_of(state))
    assert (summary.best_score, summary.best_trial_index, summary.best_candidate) == (1.5, 3, "prompt 3")


async def test_candidate_payloads_of_every_kind_and_none(client: ChronicleClient) -> None:
    state = client.optimization(name="kinds", optimizer="gepa")
    round = await state.start_round()
    payloads: list[dict[str, Any] | None] = [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "{question}"}]},
        {"planner": "Plan the steps.", "writer": "Write the answer."},
        {"tools": [{"name": "search", "description": "web search", "parameters": {"q": "string"}}]},
        {"temperature": 0.7, "top_p": 0.9, "max_tokens": 512, "stream": False},
        None,
    ]
    for n, payload in enumerate(payloads):
        await state.record_trial(round, candidate=payload, score=n / 10, metrics={"latency_ms": 100 + n})
    [entry] = await state.history()
    assert [t["candidate"] for t in entry["trials"]] == payloads
    assert entry["trials"][-1]["candidate_id"] is None
    ids = [t["candidate_id"] for t in entry["trials"][:-1]]
    assert len(set(ids)) == 4 and all(ids)
    again = await state.record_trial(round, candidate=copy.deepcopy(payloads[3]), score=0.0)
    assert again.candidate_id == ids[3], "the same candidate keeps its id"


async def test_round_end_with_a_stop_reason_stops_the_optimization(client: ChronicleClient) -> None:
    state = client.optimization(name="early stop", optimizer="evolutionary")
    round = await state.start_round()
    await state.record_trial(round, candidate={"x": 1}, score=1.0)
    ended = await state.end_round(round, stop_reason="converged")
    assert ended.stopped and ended.stop_reason == "converged"
    with pytest.raises(ChronicleError) as refused:
        await state.start_round()
    assert refused.value.code == "conflict" and "converged" in refused.value.message
    summary = await client.optimizations.get(id_of(state))
    assert summary.stopped and summary.stop_reason == "converged"
    with pytest.raises(ChronicleError) as again:
        await state.finalize_stop("twice")
    assert again.value.code == "conflict"


async def test_stop_is_stamped_on_the_last_round_when_missing(client: ChronicleClient) -> None:
    state = client.optimization(name="stamp", optimizer="few_shot")
    ended_round = await state.start_round()
    await state.record_trial(ended_round, candidate={"shots": 2}, score=0.3)
    await state.end_round(ended_round)
    open_round = await state.start_round()
    await state.record_trial(open_round, candidate={"shots": 4}, score=0.6)
    await state.finalize_stop("max rounds")
    history = await state.history()
    assert [(r["stop_reason"], r["stopped"]) for r in history] == [(None, False), ("max rounds", True)]
    assert history[1]["ended_at"] is not None and history[1]["best_candidate"] == {"shots": 4}
    with pytest.raises(ChronicleError) as refused:
        await state.record_trial(open_round, candidate={"shots": 8}, score=0.9)
    assert refused.value.code == "conflict" and refused.value.fields == ["round_id"]

    other = client.optimization(name="stamp ended", optimizer="few_shot")
    only = await other.start_round()
    await other.end_round(only)
    await other.finalize_stop("done")
    assert [(r["stop_reason"], r["stopped"]) for r in await other.history()] == [("done", True)]
    assert other.entries()[0]["stop_reason"] == "done"


async def test_lifecycle_rules_refuse_and_write_nothing(client: ChronicleClient, connect: ClientFactory) -> None:
    state = client.optimization(name="rules", optimizer="grid")
    round = await state.start_round()
    with pytest.raises(ChronicleError) as still_open:
        await state.start_round()
    assert still_open.value.code == "conflict" and still_open.value.fields == ["optimization_id"]
    await state.end_round(round)
    with pytest.raises(ChronicleError) as taken:
        await state.start_round(round_index=0)
    assert taken.value.code == "conflict" and taken.value.fields == ["round_index"]
    jumped = await state.start_round(round_index=5)
    assert jumped.round_index == 5 and jumped.first_trial_index == 0

    plain = await client.sessions.create("not an optimization")
    with pytest.raises(ChronicleError) as not_optimization:
        await client.optimizations.start_round(plain.session_id)
    assert not_optimization.value.code == "invalid" and not_optimization.value.fields == ["optimization_id"]

    for bad, field in (({"score": float("inf")}, "score"), ({"extras": {"parents": "p1"}}, "extras.parents")):
        with pytest.raises(ChronicleError) as invalid:
            await client.optimizations.record_trial(jumped.round_id, candidate={"x": 1}, **bad)
        assert invalid.value.code == "invalid" and invalid.value.fields[0].startswith(field)
    with pytest.raises(ChronicleError) as unknown:
        await client.request("cmd.trial.record", {"round_id": str(jumped.round_id), "scroe": 1})
    assert unknown.value.code == "invalid" and "scroe" in unknown.value.fields

    stranger = await connect(f"stranger-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ChronicleError) as hidden:
        await stranger.optimizations.record_trial(jumped.round_id, candidate={"x": 1}, score=1.0)
    assert hidden.value.code == "not_found"
    for call in (
        stranger.optimizations.get(id_of(state)),
        stranger.optimizations.history_page(id_of(state)),
        stranger.optimizations.start_round(id_of(state)),
    ):
        with pytest.raises(ChronicleError) as invisible:
            await call
        assert invisible.value.code == "not_found"
    assert [r["round_index"] for r in await state.history()] == [0, 5]
    assert (await client.optimizations.get(id_of(state))).trials == 0


async def test_concurrent_recorders_get_unique_gap_free_indices(
    chronicle: Chronicle, second_instance: Chronicle, connect: ClientFactory
) -> None:
    user = f"optimizer-{uuid.uuid4().hex[:8]}"
    recorders = [await connect(user) for _ in range(8)]
    state = recorders[0].optimization(name="parallel", optimizer="random_search", direction="maximize")
    round = await state.start_round()
    conflicts_before = chronicle.bus.conflicts + second_instance.bus.conflicts
    rng = random.Random(7)
    scores = [[rng.uniform(0, 1) for _ in range(25)] for _ in recorders]

    async def record(n: int) -> list[tuple[int, float, float | None]]:
        api = recorders[n].optimizations
        out = []
        for m, score in enumerate(scores[n]):
            trial = await api.record_trial(round.round_id, candidate={"worker": n, "m": m}, score=score)
            out.append((trial.trial_index, score, trial.best_so_far))
        return out

    results = sorted(r for batch in await asyncio.gather(*(record(n) for n in range(8))) for r in batch)
    assert [index for index, _, _ in results] == list(range(200)), "unique and gap-free"
    best = None
    for index, score, best_so_far in results:  # in index order, best_so_far is the running maximum
        best = score if best is None else max(best, score)
        assert best_so_far == best, f"trial {index}"
    assert chronicle.bus.conflicts + second_instance.bus.conflicts > conflicts_before, "both instances met"

    for recorder in recorders:
        recorders[0].observed(recorder.last_position)
    [entry] = await recorders[0].optimizations.history(id_of(state))
    assert [t["trial_index"] for t in entry["trials"]] == list(range(200))
    summary = await recorders[0].optimizations.get(id_of(state))
    assert summary.trials == 200 and summary.best_score == max(max(s) for s in scores)


async def test_overlapping_record_trial_calls_share_requests_and_each_gets_its_own_trial(
    client: ChronicleClient,
) -> None:
    state = client.optimization(name="coalesced", optimizer="evolutionary")
    round = await state.start_round()
    subject = f"{client.prefix}.cmd.trial.>"
    requests: list[str] = []

    async def seen(msg: object) -> None:
        requests.append(msg.subject)  # type: ignore[attr-defined]

    spy = await client.nc.subscribe(subject, cb=seen)  # beside the service's queue group: a copy of each
    await client.nc.flush()
    population = [{"gene": n} for n in range(60)]
    recorded = await asyncio.gather(
        *(state.record_trial(round, candidate=gene, score=n / 100) for n, gene in enumerate(population))
    )
    await spy.unsubscribe()
    assert sorted(t.trial_index for t in recorded) == list(range(60)), "unique and gap-free"
    assert [t.score for t in recorded] == [n / 100 for n in range(60)], "each caller gets its own trial"
    assert len(requests) < 60 and f"{client.prefix}.cmd.trial.record_many" in requests
    [entry] = await state.history()
    by_index = {t["trial_index"]: t["candidate"] for t in entry["trials"]}
    assert [by_index[t.trial_index] for t in recorded] == population

    lone = await state.record_trial(round, candidate={"gene": 60}, score=0.0)
    assert lone.trial_index == 60, "a call on its own leaves at once"
    assert sorted(t["trial_index"] for t in state.entries()[0]["trials"]) == list(range(61))


async def test_a_refused_trial_among_overlapping_calls_fails_alone(client: ChronicleClient) -> None:
    state = client.optimization(name="one bad", optimizer="evolutionary")
    round = await state.start_round()
    calls = [state.record_trial(round, candidate={"n": n}, score=float(n)) for n in range(8)]
    calls.insert(3, state.record_trial(round, candidate={"n": "bad"}, extra={"parents": [1]}))  # refused by the service
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    refused = outcomes.pop(3)
    assert isinstance(refused, ChronicleError) and refused.code == "invalid" and refused.fields == ["extras.parents"]
    assert sorted(t.trial_index for t in outcomes) == list(range(8))  # type: ignore[union-attr]
    with pytest.raises(ChronicleError) as local:
        await state.record_trial(round, candidate={"n": 9}, score=float("nan"))
    assert local.value.code == "invalid" and local.value.fields == ["score"]
    await state.end_round(round)
    late = [state.record_trial(round, candidate={"n": n}, score=1.0) for n in range(3)]
    for outcome in await asyncio.gather(*late, return_exceptions=True):
        assert isinstance(outcome, ChronicleError) and outcome.code == "conflict"


async def test_history_has_every_field_of_the_normalized_shape(client: ChronicleClient) -> None:
    state = client.optimization(name="shape", optimizer="parameter_search")
    ended = await state.start_round()
    await state.record_trial(ended, candidate={"lr": 0.2}, score=0.4)
    await state.end_round(ended)
    round = await state.start_round()
    await state.record_trial(round, candidate={"lr": 0.1}, score=0.5, dataset="dev", extra={"seed": 1})
    raw = await client.request(
        "query.optimizations.history",
        {"optimization_id": str(id_of(state)), "min_position": client.last_position},
    )
    for entry in raw["rounds"]:
        assert ROUND_KEYS <= entry.keys()
        for trial in entry["trials"]:
            assert TRIAL_KEYS <= trial.keys()
    open_round = raw["rounds"][1]
    assert open_round["best_score"] == 0.5 and open_round["best_candidate"] == {"lr": 0.1}
    assert open_round["candidates"] == [], "candidates are what the optimizer gives when a round ends"
    assert open_round["trials"][0]["dataset"] == "dev" and open_round["trials"][0]["extra"] == {"seed": 1}


async def test_history_pages_never_split_a_round(client: ChronicleClient) -> None:
    state = client.optimization(name="pages", optimizer="grid")
    for r in range(5):
        round = await state.start_round()
        for t in range(3):
            await state.record_trial(round, candidate={"r": r, "t": t}, score=r + t / 10)
        await state.end_round(round)
    first = await client.optimizations.history_page(id_of(state), max_trials=7)
    assert [r.round_index for r in first.rounds] == [0, 1, 2] and first.next_after_round == 2
    everything = await client.optimizations.history(id_of(state), max_trials=4)
    assert [r["round_index"] for r in everything] == [0, 1, 2, 3, 4]
    assert [t["trial_index"] for r in everything for t in r["trials"]] == list(range(15))


async def test_replaying_the_events_gives_the_same_history(chronicle: Chronicle, client: ChronicleClient) -> None:
    state = client.optimization(name="replay", optimizer="evolutionary", direction="minimize")
    parent = None
    for r in range(3):
        round = await state.start_round(extras={"generation": r})
        for t in range(4):
            candidate = {"gene": r * 10 + t}
            extra = {"parents": [parent], "origin": "mutation"} if parent else {"origin": "fresh"}
            trial = await state.record_trial(round, candidate=candidate, score=10 - r - t / 4, extra=extra)
        parent = trial.candidate_id
        await state.end_round(round, extras={"pareto_front": [candidate]})
    await state.finalize_stop("generations done")
    before = await state.history()
    assert parent is not None
    lineage_before = await client.optimizations.lineage(id_of(state), parent)

    for projection in (OptimizationsProjection, LineageProjection):  # tiny batches: other boundaries
        await asyncio.to_thread(rebuild, chronicle.target, read_model_of(projection), batch_size=3)
    assert await state.history() == before
    assert await client.optimizations.lineage(id_of(state), parent) == lineage_before
    assert before == state.entries(), "the client's own record agrees with the service's"


async def test_pareto_front_of_the_last_round_and_of_all_trials(client: ChronicleClient) -> None:
    state = client.optimization(name="pareto", optimizer="gepa", direction="maximize")
    first = await state.start_round()
    for accuracy, cost in [(0.9, 5.0), (0.8, 1.0), (0.7, 3.0), (0.95, 9.0)]:
        await state.record_trial(first, candidate={"a": accuracy}, score=accuracy, metrics={"accuracy": accuracy, "cost": cost})
    await state.end_round(first)
    second = await state.start_round()
    for accuracy, cost in [(0.6, 0.5), (0.5, 2.0)]:
        await state.record_trial(second, candidate={"a": accuracy}, score=accuracy, metrics={"accuracy": accuracy, "cost": cost})
    directions = {"accuracy": "maximize", "cost": "minimize"}
    everything = await client.optimizations.pareto(
        id_of(state), scope="all", objectives=["accuracy", "cost"], directions=directions
    )
    assert [p.trial_index for p in everything.front] == [0, 1, 3, 4] and everything.considered == 6
    last = await client.optimizations.pareto(id_of(state), objectives=["accuracy", "cost"], directions=directions)
    assert [p.trial_index for p in last.front] == [4]
    by_score = await client.optimizations.pareto(id_of(state), scope="all")
    assert [p.objectives for p in by_score.front] == [{"score": 0.95}]
    with pytest.raises(ChronicleError) as bad:
        await client.optimizations.pareto(id_of(state), directions={"speed": "maximize"})
    assert bad.value.code == "invalid" and bad.value.fields == ["directions"]


async def test_a_pareto_front_too_large_to_compute_is_refused_before_any_is_read(client: ChronicleClient) -> None:
    state = client.optimization(name="wide front", optimizer="nsga", direction="maximize")
    round = await state.start_round()
    trials = [
        {"candidate": {"n": n}, "score": n, "metrics": {"a": n, "b": -n, "c": n % 7}}
        for n in range(MAX_PARETO_TRIALS_MANY_OBJECTIVES + 1)
    ]
    for start in range(0, len(trials), 1000):
        await state.record_trials(round, trials[start : start + 1000])
    with pytest.raises(ChronicleError) as refused:
        await client.optimizations.pareto(id_of(state), objectives=["a", "b", "c"])
    assert (refused.value.code, refused.value.fields) == ("invalid", ["scope"])
    assert "at most 2,000 trials" in refused.value.message
    two = await client.optimizations.pareto(id_of(state), objectives=["a", "b"])  # a sweep: allowed
    assert two.considered == len(trials) and len(two.front) == len(trials)  # every trial is on it


async def test_a_front_over_sixteen_objectives_is_the_front_of_what_was_recorded(client: ChronicleClient) -> None:
    """The largest front the query computes: 2,000 trials on 16 metrics each, where nearly
    every trial is on the front (what cost n x front comparisons, 4 s of service time). It is
    the front of the values recorded (domain/optimization.py, whose properties hold it to
    every pair compared), and it considered the 2,000 trials, no more."""
    rng = random.Random(29)
    state = client.optimization(name="sixteen objectives", optimizer="nsga", direction="maximize")
    round = await state.start_round()
    names = [f"m{k}" for k in range(16)]
    metrics = [{name: round_to(rng.random()) for name in names} for _ in range(MAX_PARETO_TRIALS_MANY_OBJECTIVES)]
    trials = [{"candidate": {"n": n}, "score": n, "metrics": values} for n, values in enumerate(metrics)]
    for start in range(0, len(trials), 1000):
        await state.record_trials(round, trials[start : start + 1000])
    directions: dict[str, Direction] = {name: rng.choice(["maximize", "minimize"]) for name in names}
    front = await client.optimizations.pareto(id_of(state), objectives=names, directions=directions)
    expected = pareto_front(
        [(n, tuple(values[name] for name in names)) for n, values in enumerate(metrics)],
        tuple(directions[name] for name in names),
    )
    assert [p.trial_index for p in front.front] == expected
    assert front.considered == len(trials) and len(expected) > len(trials) // 2
    assert front.front[0].objectives == metrics[expected[0]]


def round_to(value: float) -> float:
    return round(value, 2)  # (ties in every objective: equal values are where fronts go wrong)


async def test_compare_gives_each_best_so_far_curve(client: ChronicleClient, connect: ClientFactory) -> None:
    ids: list[uuid.UUID] = []
    for scores in ([0.1, 0.3, 0.2, 0.5], [0.4, 0.1]):
        state = client.optimization(name=f"curve {len(ids)}", optimizer="random_search")
        round = await state.start_round()
        for score in scores:
            await state.record_trial(round, candidate={"s": score}, score=score)
        ids.append(await state.start())
    comparison = await client.optimizations.compare(ids)
    assert [[(p.trial_index, p.best_so_far) for p in c.points] for c in comparison.curves] == [
        [(0, 0.1), (1, 0.3), (3, 0.5)],
        [(0, 0.4)],
    ]
    stranger = await connect(f"stranger-{uuid.uuid4().hex[:8]}")
    with pytest.raises(ChronicleError) as hidden:
        await stranger.optimizations.compare(ids)
    assert hidden.value.code == "not_found"


async def test_a_lineage_too_dense_to_walk_deep_is_refused_naming_depth(client: ChronicleClient) -> None:
    """101 candidates each listing all the others as parents: walked 1,000 generations deep
    it would visit every candidate at every depth; it is cut off and named, not waited for."""
    state = client.optimization(name="dense", optimizer="evolutionary")
    round = await state.start_round()
    names = [f"c{n}" for n in range(101)]
    trials = [
        {"candidate": {"id": name}, "score": 0.0, "extra": {"parents": [p for p in names if p != name]}}
        for name in names
    ]
    for start in range(0, len(trials), 50):
        await state.record_trials(round, trials[start : start + 50])
    shallow = await client.optimizations.lineage(id_of(state), "c0", depth=2)
    assert len(shallow.lineage) == 101  # every candidate is a parent of c0
    with pytest.raises(ChronicleError) as refused:
        await client.optimizations.lineage(id_of(state), "c0", depth=1000)
    assert (refused.value.code, refused.value.fields) == ("invalid", ["depth"])


async def test_candidate_lineage_across_rounds(client: ChronicleClient) -> None:
    state = client.optimization(name="lineage", optimizer="evolutionary")
    first = await state.start_round()
    a = await state.record_trial(first, candidate={"id": "a", "p": 1}, score=0.1, extra={"origin": "fresh"})
    b = await state.record_trial(first, candidate={"id": "b", "p": 2}, score=0.2, extra={"origin": "fresh"})
    await state.end_round(first)
    second = await state.start_round()
    crossed = await state.record_trial(
        second, candidate={"id": "ab", "p": 3}, score=0.4,
        extra={"parents": ["a", "b"], "origin": "crossover", "ops": ["swap:p"]},
    )
    await state.end_round(second)
    third = await state.start_round()
    mutant = await state.record_trial(
        third, candidate={"id": "ab2", "p": 4}, score=0.5, extra={"parents": ["ab"], "origin": "mutation"}
    )
    assert (a.candidate_id, b.candidate_id, crossed.candidate_id, mutant.candidate_id) == ("a", "b", "ab", "ab2")
    lineage = await client.optimizations.lineage(id_of(state), "ab2")
    assert [(n.candidate_id, n.depth, n.first_round_index) for n in lineage.lineage] == [
        ("ab2", 0, 2), ("ab", 1, 1), ("a", 2, 0), ("b", 2, 0)
    ]
    assert lineage.lineage[1].parents == ["a", "b"] and lineage.lineage[1].ops == ["swap:p"]
    assert lineage.lineage[1].origin == "crossover" and lineage.lineage[1].best_score == 0.4
    shallow = await client.optimizations.lineage(id_of(state), "ab2", depth=1)
    assert [n.candidate_id for n in shallow.lineage] == ["ab2", "ab"]
    with pytest.raises(ChronicleError) as missing:
        await client.optimizations.lineage(id_of(state), "zz")
    assert missing.value.code == "not_found"


async def test_a_retried_trial_with_its_idempotency_key_is_recorded_once(client: ChronicleClient) -> None:
    state = client.optimization(name="retry", optimizer="grid")
    round = await state.start_round()
    key = f"trial-{uuid.uuid4()}"
    first = await client.optimizations.record_trial(round.round_id, candidate={"x": 1}, score=0.5, idempotency_key=key)
    again = await client.optimizations.record_trial(round.round_id, candidate={"x": 1}, score=0.5, idempotency_key=key)
    assert again == first
    following = await client.optimizations.record_trial(round.round_id, candidate={"x": 2}, score=0.1)
    assert following.trial_index == first.trial_index + 1
    [entry] = await state.history()
    assert [t["trial_index"] for t in entry["trials"]] == [0, 1]


async def test_a_closed_optimization_session_takes_no_more_rounds(client: ChronicleClient) -> None:
    state = client.optimization(name="closed", optimizer="grid")
    await client.sessions.close(await state.start())
    with pytest.raises(ChronicleError) as refused:
        await state.start_round()
    assert refused.value.code == "conflict"


async def test_a_round_too_big_for_one_reply_comes_in_parts(
    client: ChronicleClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = client.optimization(name="huge round", optimizer="grid", direction="minimize")
    small = await state.start_round()
    await state.record_trial(small, candidate={"p": -1}, score=9.0)
    await state.end_round(small)
    big = await state.start_round()
    for n in range(30):
        await state.record_trial(big, candidate={"p": n, "pad": "x" * 40}, score=float(30 - n) if n % 7 else None)
    await state.end_round(big, best_score=None)
    after = await state.start_round()
    await state.record_trial(after, candidate={"p": 99}, score=0.5)
    whole = await state.history()

    monkeypatch.setattr(queries_optimization, "REPLY_BUDGET", 1_500)  # a few trials per reply
    first = await client.optimizations.history_page(id_of(state))
    assert [r.round_index for r in first.rounds] == [0] and first.next_after_round == 0
    second = await client.optimizations.history_page(id_of(state), after_round=0)
    assert [r.round_index for r in second.rounds] == [1] and not second.rounds[0].complete
    assert second.next_after_round == 0 and second.next_after_trial == second.rounds[0].trials[-1].trial_index
    parts = await state.history()
    assert [r["round_index"] for r in parts] == [0, 1, 2]
    assert [t["trial_index"] for t in parts[1]["trials"]] == list(range(1, 31))
    assert parts[1]["best_score"] == whole[1]["best_score"] == 1.0
    assert parts == whole


async def test_a_history_of_many_pages_is_planned_by_its_first_page(
    client: ChronicleClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = client.optimization(name="planned pages", optimizer="grid")
    for r in range(7):
        round = await state.start_round()
        await state.record_trials(round, [{"candidate": {"r": r, "t": t}, "score": t} for t in range(4)])
        await state.end_round(round)
    whole = await state.history()

    monkeypatch.setattr(queries_optimization, "REPLY_BUDGET", 2_500)  # two rounds per reply
    first = await client.optimizations.history_page(id_of(state))
    assert [r.round_index for r in first.rounds] == [0] and first.next_after_round == 0, "a small first page"
    assert [(p.after_round, p.until_round) for p in first.planned] == [(0, 2), (2, 4), (4, 6)]
    middle = await client.optimizations.history_page(id_of(state), after_round=2, until_round=4)
    assert [r.round_index for r in middle.rounds] == [3, 4] and middle.next_after_round == 4 and not middle.planned
    last = await client.optimizations.history_page(id_of(state), after_round=4, until_round=6)
    assert [r.round_index for r in last.rounds] == [5, 6] and last.next_after_round is None
    assert await state.history() == whole

    await state.start_round()  # an open round, planned like the others
    grown = await state.history()
    assert [r["round_index"] for r in grown] == list(range(8)) and grown[:7] == whole


async def test_more_planned_pages_than_are_asked_for_at_once_join_up_in_order(
    client: ChronicleClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = client.optimization(name="many pages", optimizer="grid", direction="minimize")
    for r in range(12):
        round = await state.start_round(extras={"r": r})
        await state.record_trials(round, [{"candidate": {"r": r, "t": t}, "score": 10.0 - t} for t in range(3)])
        await state.end_round(round)
    open_round = await state.start_round()  # and an open one: its trials joined by the query, its best so far
    await state.record_trials(open_round, [{"candidate": {"open": t}, "score": s} for t, s in enumerate([3.0, 1.0, 2.0, 1.0])])
    whole = await state.history()
    assert (whole[-1]["best_score"], whole[-1]["best_candidate"]) == (1.0, {"open": 1})

    monkeypatch.setattr(queries_optimization, "REPLY_BUDGET", 1_200)  # a round per reply
    first = await client.optimizations.history_page(id_of(state))
    assert len(first.planned) > client_optimization.PAGES_IN_FLIGHT, "more pages planned than asked for at once"
    paged = await state.history()
    assert [r["round_index"] for r in paged] == list(range(13))
    assert paged == whole, "the same shape and values"
    assert whole == state.entries(), "the client's own record agrees with the service's"


async def test_an_ended_rounds_trials_read_as_they_did_while_it_was_open(client: ChronicleClient) -> None:
    state = client.optimization(name="open then ended", optimizer="evolutionary")
    round = await state.start_round()
    await state.record_trials(round, [
        {"candidate": {"g": n, "text": "grüße \u2603"}, "score": n / 10, "metrics": {"n": n}, "dataset": "dev",
         "extra": {"origin": "mutation"}} for n in range(5)
    ])
    [open_round] = await state.history()
    await state.end_round(round)
    [ended] = await state.history()
    assert ended["trials"] == open_round["trials"] and ended["ended_at"] is not None
    raw = await client.request(
        "query.optimizations.history",
        {"optimization_id": str(id_of(state)), "min_position": client.last_position},
    )
    only_while_invalid = {"corrected_best_so_far", "invalid"}  # (this optimization has no invalid trial)
    assert [set(trial) for trial in raw["rounds"][0]["trials"]] == [set(TrialEntry.model_fields) - only_while_invalid] * 5


async def test_a_history_without_rounds_and_a_strangers_pages(client: ChronicleClient, connect: ClientFactory) -> None:
    state = client.optimization(name="nothing yet", optimizer="grid", direction="minimize")
    optimization_id = await state.start()
    assert await state.history() == []
    empty = await client.optimizations.history_page(optimization_id, after_round=3)
    assert (empty.rounds, empty.next_after_round, empty.direction) == ([], None, "minimize")
    round = await state.start_round()
    await state.record_trial(round, candidate={"x": 1}, score=1.0)

    stranger = await connect(f"stranger-{uuid.uuid4().hex[:8]}")
    for cursor in ({}, {"after_round": -1, "until_round": 0}, {"after_round": -1, "after_trial": -1}, {"after_round": 7}):
        with pytest.raises(ChronicleError) as hidden:
            await stranger.optimizations.history_page(optimization_id, **cursor)
        assert hidden.value.code == "not_found", cursor
    with pytest.raises(ChronicleError) as missing:
        await client.optimizations.history_page(uuid.uuid4())
    assert missing.value.code == "not_found"


async def test_a_population_is_recorded_in_one_request_in_order(client: ChronicleClient) -> None:
    state = client.optimization(name="population", optimizer="evolutionary")
    first = await state.start_round()
    await state.record_trial(first, candidate={"g": 0}, score=0.3)
    population = [{"candidate": {"g": n}, "score": n / 10, "extra": {"origin": "mutation"}} for n in range(1, 6)]
    recorded = await state.record_trials(first, population)
    assert [t.trial_index for t in recorded] == [1, 2, 3, 4, 5]
    assert [t.best_so_far for t in recorded] == [0.3, 0.3, 0.3, 0.4, 0.5]
    with pytest.raises(ChronicleError) as invalid:
        await state.record_trials(first, [{"candidate": {"g": 9}, "score": 1.0}, {"candidate": {"g": 10}, "extra": {"parents": [1]}}])
    assert invalid.value.code == "invalid" and invalid.value.fields == ["extras.parents"]
    [entry] = await state.history()
    assert [t["trial_index"] for t in entry["trials"]] == list(range(6)), "the refused batch wrote nothing"
    assert state.entries()[0]["trials"][-1]["candidate"] == {"g": 5}


async def test_an_invalidated_trial_stays_marked_and_bests_fronts_and_curves_leave_it_out(
    chronicle: Chronicle, connect: ClientFactory,
) -> None:
    client = await connect()
    state = client.optimization(name="leaky", optimizer="gepa", direction="maximize")
    other = client.optimization(name="clean", optimizer="gepa", direction="maximize")
    first = await state.start_round()
    recorded = [await state.record_trial(first, candidate={"p": n}, score=s, metrics={"cost": c})
                for n, (s, c) in enumerate([(0.5, 3.0), (0.9, 1.0), (0.6, 2.0)])]
    await state.end_round(first)  # its best as recorded: the leaky 0.9
    second = await state.start_round()
    for n, s in enumerate([0.7, 0.8]):
        await state.record_trial(second, candidate={"p": 10 + n}, score=s, metrics={"cost": 5.0})
    assert await state.history() == state.entries()
    await other.start_round()

    leaky = recorded[1]
    invalidated = await client.optimizations.invalidate_trial(leaky.trial_id, "scored on a leaked test set")
    assert (invalidated.valid, invalidated.reason, invalidated.trial_index) == (False, "scored on a leaked test set", 1)
    client.observed(invalidated.position)

    history = await state.history()
    trials = [trial for round in history for trial in round["trials"]]
    assert [t["best_so_far"] for t in trials] == [0.5, 0.9, 0.9, 0.9, 0.9]  # the curve as first recorded
    assert [t["corrected_best_so_far"] for t in trials] == [0.5, 0.5, 0.6, 0.7, 0.8]  # and without the leak
    assert trials[1]["invalid"]["reason"] == "scored on a leaked test set" and trials[1]["invalid"]["at"]
    assert all("invalid" not in t for i, t in enumerate(trials) if i != 1)
    assert (history[0]["best_score"], history[0]["corrected_best_score"]) == (0.9, 0.6)
    assert history[0]["corrected_best_candidate"] == {"p": 2}
    assert (history[1]["corrected_best_score"], history[1]["corrected_best_so_far"]) == (0.8, 0.8)
    summary = await client.optimizations.get(id_of(state))
    assert (summary.best_score, summary.best_trial_index, summary.invalid_trials) == (0.8, 4, 1)
    front = await client.optimizations.pareto(id_of(state), scope="all", objectives=["score", "cost"],
                                              directions={"cost": "minimize"})
    assert 1 not in [point.trial_index for point in front.front] and front.considered == 4
    curves = {c.optimization_id: c for c in (await client.optimizations.compare(
        [id_of(state), id_of(other)])).curves}
    assert [(p.trial_index, p.best_so_far) for p in curves[id_of(state)].points] == [
        (0, 0.5), (2, 0.6), (3, 0.7), (4, 0.8)]

    # A trial recorded afterwards is stamped as before, and corrected too.
    later = await state.record_trial(second, candidate={"p": 12}, score=0.85)
    assert later.best_so_far == 0.9
    last = (await state.history())[-1]["trials"][-1]
    assert (last["best_so_far"], last["corrected_best_so_far"]) == (0.9, 0.85)

    with pytest.raises(ChronicleError) as twice:
        await client.optimizations.invalidate_trial(leaky.trial_id, "again")
    assert twice.value.code == "conflict"
    with pytest.raises(ChronicleError) as blank:
        await client.optimizations.invalidate_trial(recorded[0].trial_id, "   ")
    assert blank.value.code == "invalid" and blank.value.fields == ["reason"]
    stranger = await connect()
    with pytest.raises(ChronicleError) as foreign:
        await stranger.optimizations.invalidate_trial(recorded[0].trial_id, "not mine")
    assert foreign.value.code == "not_found"

    restored = await client.optimizations.restore_trial(leaky.trial_id)
    assert (restored.valid, restored.reason) == (True, None)
    client.observed(restored.position)
    assert await state.history() == state.entries(), "restored: the history is as recorded again"
    assert (await client.optimizations.get(id_of(state))).best_score == 0.9
    with pytest.raises(ChronicleError) as valid:
        await client.optimizations.restore_trial(leaky.trial_id)
    assert valid.value.code == "conflict"
    events = await client.audit.events(leaky.trial_id)
    assert [(e.type, e.payload.get("by"), e.payload.get("reason")) for e in events[1:]] == [
        ("Trial.Invalidated", client.user, "scored on a leaked test set"), ("Trial.Restored", client.user, None),
    ]

    client.observed((await client.optimizations.invalidate_trial(leaky.trial_id, "leaked after all")).position)
    before = await state.history()
    await asyncio.to_thread(rebuild, chronicle.target, read_model_of(OptimizationsProjection))  # the same from the events
    assert await state.history() == before and before[0]["corrected_best_score"] == 0.6
