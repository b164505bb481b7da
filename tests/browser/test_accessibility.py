"""The console's accessibility: axe-core (the npm package the console's tests install) finds
no serious or critical violation on each screen, and every control is reached by Tab."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page

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
