"""The console's accessibility: axe-core (the npm package the console's tests install) finds
no serious or critical violation on each screen, every control is reached by Tab, and every
input has a label. Each section is checked with its content shown: the inbox, a
conversation, an optimization's charts, an artifact with its lineage tree, a job with its
result, and an audit timeline with a chain verified."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory

AXE = Path(__file__).resolve().parents[2] / "console" / "node_modules" / "axe-core" / "axe.min.js"
CONTROLS = "button:not([disabled]), input, select, textarea, a[href], summary"


@pytest.fixture
async def audited(browser: Browser, tmp_path: Path) -> AsyncIterator[Page]:
    """A page that may run axe: the console's CSP allows no injected script, so this context
    alone bypasses it (the page's own code runs as always)."""
    if not AXE.is_file():
        pytest.skip(f"no {AXE}: ./dev test installs the console's npm packages (npm ci in console/)")
    context = await browser.new_context(bypass_csp=True, viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    yield page
    await page.screenshot(path=str(tmp_path / "final.png"), full_page=True)
    await context.close()


async def serious_violations(page: Page) -> list[dict[str, Any]]:
    await page.add_script_tag(path=str(AXE))
    found: list[dict[str, Any]] = await page.evaluate(
        """async () => (await axe.run(document)).violations
            .filter((v) => v.impact === 'serious' || v.impact === 'critical')
            .map((v) => ({id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target.join(' '))}))""")
    return found


async def unreachable_by_tab(page: Page) -> list[str]:
    """The visible controls that pressing Tab from the top never focuses."""
    controls: list[str] = await page.evaluate(
        f"""() => [...document.querySelectorAll({CONTROLS!r})].filter((e) => e.offsetParent !== null)
            .map((e, n) => {{ e.dataset.tabProbe = String(n); return String(n); }})""")
    reached: set[str] = set()
    await page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for _ in range(len(controls) * 2 + 5):
        await page.keyboard.press("Tab")
        probe = await page.evaluate("() => document.activeElement?.dataset?.tabProbe ?? null")
        if probe is not None:
            reached.add(probe)
    return [await page.evaluate(f"() => document.querySelector('[data-tab-probe=\"{n}\"]').outerHTML.slice(0, 120)")
            for n in controls if n not in reached]


async def unlabelled_inputs(page: Page) -> list[str]:
    """The visible inputs, selects and text areas with no accessible name of their own (a
    label, aria-label, or aria-labelledby naming text): a placeholder does not count."""
    found: list[str] = await page.evaluate(
        r"""() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
            .filter((e) => e.offsetParent !== null)
            .filter((e) => {
                const labelled = [...(e.labels ?? [])].some((l) => l.textContent.trim());
                const named = (e.getAttribute('aria-label') ?? '').trim();
                const by = (e.getAttribute('aria-labelledby') ?? '').split(/\s+/).filter(Boolean)
                    .some((id) => document.getElementById(id)?.textContent.trim());
                return !(labelled || named || by);
            })
            .map((e) => e.outerHTML.slice(0, 120))""")
    return found


async def assert_accessible(page: Page) -> None:
    assert await serious_violations(page) == []
    assert await unreachable_by_tab(page) == []
    assert await unlabelled_inputs(page) == []


async def test_each_screen_has_no_serious_violation_and_every_control_is_reached_by_tab(
    audited: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    page = audited
    user = f"a11y-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    conversation = (await client.conversations.start(title="Accessible", tags=["a11y"])).conversation_id
    await client.conversations.add_message(conversation, "user", "Is every control reachable?")
    await client.hitl.pause(conversation, step="check", prompt="Reachable?", data={"form": {"answer": "yes", "ok": True}})

    await page.goto(console.url + "/")
    await page.get_by_label("Bearer token").fill("x")
    assert await serious_violations(page) == []
    assert await unreachable_by_tab(page) == []

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("heading", name="Reachable?").wait_for()
    assert await serious_violations(page) == []
    assert await unreachable_by_tab(page) == []

    await page.get_by_role("link", name="Conversations").click()
    await page.get_by_role("list", name="Your conversations").get_by_role("button").click()
    await page.get_by_role("heading", name="Accessible").wait_for()
    assert await serious_violations(page) == []
    assert await unreachable_by_tab(page) == []

    # (the check itself sees a violation: an input with no label)
    await page.evaluate("() => document.querySelector('main').append(document.createElement('input'))")
    assert [v["id"] for v in await serious_violations(page)] == ["label"]


async def test_an_optimization_with_its_charts(
    audited: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    user = f"a11y-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    name = f"accessible search {uuid.uuid4().hex[:6]}"
    optimization_id = (await client.optimizations.start(name=name, optimizer="evolution", direction="maximize")).optimization_id
    round_id = (await client.optimizations.start_round(optimization_id)).round_id
    for n, (score, cost) in enumerate([(0.4, 3.0), (0.7, 1.0), (0.6, 0.5)]):
        await client.optimizations.record_trial(round_id, candidate_id=f"c{n}", candidate={"prompt": f"c{n}"}, score=score,
                                                metrics={"cost": cost}, extras={"parents": [], "origin": "seed"})
    await client.optimizations.end_round(round_id)
    assert (await client.optimizations.get(optimization_id)).best_score == 0.7  # (read at the writes' position)

    page = audited
    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Optimizations").click()
    await page.get_by_role("list", name="Your optimizations").get_by_role("button", name=name).click()
    view = page.get_by_role("article")
    await expect(view.get_by_role("figure", name="Pareto front")).to_be_visible()
    await view.get_by_role("button", name="c1", exact=True).click()
    await expect(view.get_by_role("region", name="Candidate lineage")).to_be_visible()
    await assert_accessible(page)


async def test_an_artifact_with_its_lineage_tree(
    audited: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    user = f"a11y-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    layout = {"type": "page", "children": [{"type": "heading", "label": "Accessible"}]}
    tag = uuid.uuid4().hex[:6]
    root = await client.artifacts.store(layout, query=f"root {tag}", draft="A draft",
                                        rag_examples=[{"id": "example-1", "score": 0.9, "text": "an example"}])
    child = await client.artifacts.store(layout, query=f"child {tag}", parent_id=root.artifact_id)
    await client.artifacts.store(layout, query=f"grandchild {tag}", parent_id=child.artifact_id)
    assert len((await client.artifacts.lineage(root.artifact_id)).descendants) == 2  # (read at the writes' position)

    page = audited
    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Artifacts").click()
    await page.get_by_role("list", name="Your artifacts").get_by_role("button", name=re.compile(f"^child {tag}")).click()
    tree = page.get_by_role("article").get_by_role("figure", name="Lineage tree")
    await expect(tree.locator(".react-flow__node")).to_have_count(3)
    await assert_accessible(page)


async def test_a_job_with_its_result(audited: Page, console: HttpServer, authority: TokenAuthority) -> None:
    page = audited
    await sign_in_with(page, console.url, authority.issue(f"a11y-{uuid.uuid4().hex[:8]}"))
    await page.get_by_role("link", name="Jobs").click()
    await expect(page.get_by_text("No jobs.")).to_be_visible()
    await assert_accessible(page)  # the request form alone
    await page.get_by_label("Content to turn into a study aid").fill("Water boils at 100 degrees Celsius at sea level.")
    await page.get_by_label("Kind").select_option("summary")
    await page.get_by_role("button", name="Request").click()
    job = page.get_by_role("list", name="Your jobs").get_by_role("listitem")
    await expect(job.get_by_role("progressbar")).to_have_attribute("value", "100", timeout=60_000)
    await expect(job.get_by_role("group")).to_contain_text("Result")
    await assert_accessible(page)


async def test_an_audit_timeline_with_a_state_and_a_verified_chain(
    audited: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    user = f"a11y-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    conversation = (await client.conversations.start(title="Audited")).conversation_id
    await client.conversations.add_message(conversation, "user", "on the record")
    assert (await client.conversations.get(conversation)).message_count == 1

    page = audited
    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Audit").click()
    await assert_accessible(page)  # the form alone
    await page.get_by_label("Conversation or session id").fill(str(conversation))
    await page.get_by_role("button", name="Show timeline").click()
    chains = page.get_by_role("region", name="Chain verification")
    await chains.get_by_role("button", name=f"Verify the chain of Conversation {str(conversation)[:8]}").click()
    await expect(chains).to_contain_text("holds, 2 events checked")
    await page.get_by_role("region", name="Timeline").get_by_role("button").first.click()
    await expect(page.get_by_role("region", name="State at version")).to_be_visible()
    await assert_accessible(page)
