"""A variation set side by side and a comparison of artifacts, in Chromium."""

from __future__ import annotations

import uuid

from playwright.async_api import Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory


async def test_a_variation_set_side_by_side_and_three_artifacts_compared(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    user = f"varied-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    tag = uuid.uuid4().hex[:6]
    made = await client.artifacts.variations(f"a landing page {tag}", count=3)
    stored = [member.artifact_id for member in made.members if member.artifact_id is not None]
    assert len(stored) == 3
    assert len((await client.artifacts.list()).items) == 3  # (read at the writes' position)

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Artifacts").click()
    listed = page.get_by_role("list", name="Your artifacts").get_by_role("listitem")
    await expect(listed).to_have_count(3)
    await listed.first.get_by_role("button").click()
    varied = page.get_by_role("region", name="Variation set")
    await expect(varied.locator(".variation")).to_have_count(3)
    await expect(varied).to_contain_text(f"diversity {made.diversity:.3f}")

    compare = page.get_by_role("button", name="Compare")
    await expect(compare).to_be_disabled()
    for n in range(3):
        await listed.nth(n).get_by_role("checkbox").check()
    await compare.click()
    compared = page.get_by_role("region", name="Comparison")
    await expect(compared.get_by_role("heading")).to_have_text("Comparing 3 artifacts")
    await expect(compared.get_by_role("table").nth(1).get_by_role("row")).to_have_count(4)  # the header and 3 pairs
