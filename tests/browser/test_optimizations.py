"""An optimization's pictures in Chromium: the best-so-far curve with an invalidated trial
marked, the scores per round, the Pareto front, and a front candidate's lineage; each chart
checked for a drawing (its SVG's paths and points), screenshots saved."""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.async_api import Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory

TRIALS = [  # (round, candidate, parents, score, cost)
    (0, "seed-a", [], 0.40, 3.0), (0, "seed-b", [], 0.55, 1.0), (0, "seed-c", [], 0.95, 9.0),  # seed-c: leaked, invalidated
    (1, "child-a", ["seed-a", "seed-b"], 0.70, 2.0), (1, "child-b", ["child-a"], 0.80, 4.0), (1, "child-c", ["seed-b"], 0.50, 0.5),
]


async def test_best_so_far_rounds_pareto_and_lineage_are_drawn(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority, tmp_path: Path,
) -> None:
    user = f"optimizer-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    name = f"prompt search {uuid.uuid4().hex[:6]}"
    optimization_id = (await client.optimizations.start(name=name, optimizer="evolution", direction="maximize")).optimization_id
    rounds: dict[int, uuid.UUID] = {}
    leaked = None
    for round_index, candidate, parents, score, cost in TRIALS:
        if round_index not in rounds:
            if rounds:
                await client.optimizations.end_round(rounds[round_index - 1])
            rounds[round_index] = (await client.optimizations.start_round(optimization_id)).round_id
        recorded = await client.optimizations.record_trial(
            rounds[round_index], candidate_id=candidate, candidate={"prompt": candidate}, score=score,
            metrics={"cost": cost}, extras={"parents": parents, "origin": "crossover" if parents else "seed"})
        if candidate == "seed-c":
            leaked = recorded.trial_id
    assert leaked is not None
    await client.optimizations.invalidate_trial(leaked, "scored on a leaked test set")
    assert (await client.optimizations.get(optimization_id)).best_score == 0.80  # (read at the writes' position)

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Optimizations").click()
    await page.get_by_role("list", name="Your optimizations").get_by_role("button", name=name).click()
    view = page.get_by_role("article")
    await expect(view.get_by_role("heading", name=name)).to_be_visible()

    curve = view.get_by_role("figure", name="Best so far (maximize)")
    best = curve.locator(".recharts-scatter").nth(0).locator(".recharts-scatter-line path")
    await expect(best).to_have_count(1)
    line = await best.get_attribute("d")
    assert line is not None and line.count("L") >= 5  # a line through the trials, not a dot
    scores, crosses = curve.locator(".recharts-scatter").nth(1), curve.locator(".recharts-scatter").nth(2)
    await expect(scores.locator(".recharts-scatter-symbol path")).to_have_count(5)  # the valid trials' scores
    await expect(crosses.locator(".recharts-scatter-symbol path")).to_have_count(1)  # the invalidated one, ✕
    await expect(curve).to_contain_text("1 invalidated trial marked")
    await curve.screenshot(path=str(tmp_path / "best-so-far.png"))

    rounds_chart = view.get_by_role("figure", name="Scores per round")
    await expect(rounds_chart.locator(".recharts-scatter-symbol path")).to_have_count(5)  # valid trials only

    await view.get_by_label("Vertical objective").select_option("cost")
    await view.get_by_label("Direction of cost").select_option("minimize")
    front = view.get_by_role("figure", name="Pareto front")
    # Most score for least cost, seed-c left out: child-c (0.5, 0.5), seed-b (0.55, 1), child-a (0.7, 2), child-b (0.8, 4).
    await expect(front.locator(".recharts-scatter").nth(1).locator(".recharts-scatter-symbol path")).to_have_count(4)
    await front.screenshot(path=str(tmp_path / "pareto.png"))

    await view.get_by_role("button", name="child-b", exact=True).click()
    lineage = view.get_by_role("region", name="Candidate lineage")
    await expect(lineage.get_by_role("row")).to_have_count(5)  # the header, child-b, child-a, seed-a, seed-b
    await expect(lineage).to_contain_text("crossover")
