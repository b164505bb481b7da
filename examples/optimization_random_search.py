"""A tiny real optimizer recorded through Chronicle: run with `./dev python examples/optimization_random_search.py`.

Random search with mutation over an LLM's sampling parameters (temperature, top_p,
max_tokens) against a synthetic objective. Each round evaluates eight candidates at once
(half fresh samples, half mutations of the best so far) and records them concurrently;
Chronicle stamps trial indices, timestamps and best-so-far. The search stops when two
rounds bring no improvement, and prints the history (as `chronicle optimizations show`
would) and the ancestry of the best candidate.

It starts Chronicle in-process (embedded Postgres and NATS unless CHRONICLE_DATABASE_URL /
CHRONICLE_NATS_URL are set).
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chronicle_client.connection import ChronicleClient  # noqa: E402

from entrypoints import logs  # noqa: E402
from entrypoints.bootstrap import authority_for, bootstrap  # noqa: E402
from entrypoints.settings import Settings  # noqa: E402
from services.optimizations.report import render  # noqa: E402

PER_ROUND = 8
MAX_ROUNDS = 10
PATIENCE = 2


def objective(p: dict[str, float]) -> float:
    """Higher is better; the optimum is temperature 0.7, top_p 0.9, max_tokens 512."""
    return round(-((p["temperature"] - 0.7) ** 2 + (p["top_p"] - 0.9) ** 2 + ((p["max_tokens"] - 512) / 1024) ** 2), 6)


def fresh(rng: random.Random) -> dict[str, float]:
    return {"temperature": round(rng.uniform(0, 1.5), 3), "top_p": round(rng.uniform(0.5, 1), 3),
            "max_tokens": rng.randrange(64, 2048, 64)}


def mutate(rng: random.Random, p: dict[str, float]) -> tuple[dict[str, float], list[str]]:
    knob = rng.choice(sorted(p))
    child = dict(p)
    if knob == "max_tokens":
        child[knob] = max(64, min(2048, p[knob] + rng.choice([-128, -64, 64, 128])))
    else:
        child[knob] = round(min(1.5, max(0.0, p[knob] + rng.gauss(0, 0.1))), 3)
    return child, [f"nudge:{knob}"]


async def main() -> None:
    settings = Settings()
    logs.configure("WARNING")
    chronicle = await bootstrap(settings)
    rng = random.Random(42)
    try:
        # An optimizer records far more than a person types: its token has the bulk role
        # (each per-user limit times CHRONICLE_LIMIT_BULK_FACTOR).
        token = authority_for(settings).issue("demo-optimizer", claims={"roles": ["bulk"]})
        client = await ChronicleClient.connect(chronicle.nats_url, token, prefix=settings.subject_prefix)
        state = client.optimization(
            name="sampling parameters", optimizer="random_search+mutation", direction="maximize",
            project="demo", dataset="synthetic",
        )
        best: tuple[float, dict[str, float], str] | None = None
        stale = 0
        for _ in range(MAX_ROUNDS):
            round = await state.start_round(extras={"per_round": PER_ROUND})
            plans: list[tuple[dict[str, float], dict[str, Any]]] = []
            for n in range(PER_ROUND):
                if best is None or n < PER_ROUND // 2:
                    plans.append((fresh(rng), {"origin": "fresh"}))
                else:
                    child, ops = mutate(rng, best[1])
                    plans.append((child, {"origin": "mutation", "parents": [best[2]], "ops": ops}))
            # Evaluate and record the whole round at once, as parallel workers would.
            trials = await asyncio.gather(*(
                state.record_trial(round, candidate=c, score=objective(c), extra=extra,
                                   metrics={"distance": -objective(c)}) for c, extra in plans
            ))
            round_best = max(zip(trials, plans, strict=True), key=lambda tp: tp[0].score)
            improved = best is None or round_best[0].score > best[0]
            if improved:
                best = (round_best[0].score, round_best[1][0], round_best[0].candidate_id)
            stale = 0 if improved else stale + 1
            await state.end_round(round, candidates=[c for c, _ in plans],
                                  extras={"selection_meta": {"kept": best[2], "improved": improved}})
            if stale >= PATIENCE:
                break
        stop = f"no improvement in {PATIENCE} rounds" if stale >= PATIENCE else f"{MAX_ROUNDS} rounds done"
        await state.finalize_stop(stop)

        summary = await client.optimizations.get(state.optimization_id)
        history = await state.history()
        print(render(summary.model_dump(), history))
        lineage = await client.optimizations.lineage(state.optimization_id, best[2])  # type: ignore[index]
        print("\nancestry of the best candidate:")
        for node in lineage.lineage:
            print(f"  {'  ' * node.depth}{node.candidate_id} ({node.origin}, round {node.first_round_index},"
                  f" best {node.best_score}){' ' + ','.join(node.ops or []) if node.ops else ''}")
        await client.close()
    finally:
        await chronicle.stop()


if __name__ == "__main__":
    asyncio.run(main())
