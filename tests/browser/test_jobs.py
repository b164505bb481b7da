"""Jobs in Chromium: a job requested from the console shows its progress bar moving live
(the job's events) up to 100 and then its result, without a reload."""

from __future__ import annotations

import uuid

from playwright.async_api import Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with


async def test_a_requested_job_shows_live_progress_then_its_result(
    page: Page, console: HttpServer, authority: TokenAuthority,
) -> None:
    await sign_in_with(page, console.url, authority.issue(f"learner-{uuid.uuid4().hex[:8]}"))
    await page.get_by_role("link", name="Jobs").click()
    await expect(page.get_by_text("No jobs.")).to_be_visible()
    await page.get_by_label("Content to turn into a study aid").fill(
        "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in the chloroplasts.")
    await page.get_by_label("Kind").select_option("summary")
    await page.get_by_role("button", name="Request").click()
    job = page.get_by_role("list", name="Your jobs").get_by_role("listitem")
    await expect(job).to_have_count(1)
    bar = job.get_by_role("progressbar")
    await expect(bar).to_have_attribute("value", "100", timeout=60_000)  # (a bound on the wait, not a speed check)
    await expect(job).to_contain_text("completed")
    await expect(job.get_by_role("group")).to_contain_text("Result")
    result = await job.locator("pre").inner_text()
    assert '"key_points"' in result and "Photosynthesis" in result
