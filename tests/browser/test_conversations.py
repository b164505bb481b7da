"""Seed 001's sidebar in Chromium: the caller's conversations with their facts, a tag filter,
search with the matched words highlighted, a conversation's view, rename and tag, export
downloads and delete; another user's conversations never appear."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from playwright.async_api import Dialog, Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory


async def test_sidebar_search_view_edit_export_delete_and_only_ones_own(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority, tmp_path: Path,
) -> None:
    user, stranger_id = f"reader-{uuid.uuid4().hex[:8]}", f"stranger-{uuid.uuid4().hex[:8]}"
    mine, stranger = await connect(user), await connect(stranger_id)
    word = f"lighthouse{uuid.uuid4().hex[:6]}"  # a word only this test's conversations hold
    trip = (await mine.conversations.start(title="Coastal trip", tags=["travel"])).conversation_id
    await mine.conversations.add_message(trip, "user", f"Plan a weekend near the {word} on the cliffs")
    await mine.conversations.add_message(trip, "agent", "Saturday: the cliff walk; Sunday: the harbour.")
    groceries = (await mine.conversations.start(title="Groceries", tags=["home"])).conversation_id
    await mine.conversations.add_message(groceries, "user", "Eggs, flour, and lemons")
    theirs = (await stranger.conversations.start(title="The stranger's notes", tags=["travel"])).conversation_id
    await stranger.conversations.add_message(theirs, "user", f"My secret {word} plans")
    assert len((await mine.conversations.search(word)).items) >= 1  # (the search model has them: read at the writes' position)
    assert len((await stranger.conversations.search(word)).items) >= 1

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Conversations").click()
    listed = page.get_by_role("list", name="Your conversations").get_by_role("button")
    await expect(listed).to_have_count(2)
    await expect(listed.filter(has_text="Coastal trip")).to_contain_text("2 messages")
    await expect(listed.filter(has_text="Coastal trip")).to_contain_text(f"Plan a weekend near the {word}")
    await page.get_by_label("Tags", exact=True).fill("travel")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("Coastal trip")  # and not the stranger's travel notes

    await page.get_by_label("Search messages and titles").fill(word)
    await page.get_by_role("button", name="Search", exact=True).click()
    results = page.get_by_role("region", name="Search results")
    await expect(results.get_by_role("listitem")).to_have_count(1)
    await expect(results.locator("mark").first).to_have_text(re.compile(word, re.IGNORECASE))
    await page.screenshot(path=str(tmp_path / "search.png"), full_page=True)

    await results.get_by_role("listitem").get_by_role("button").click()
    view = page.get_by_role("article")
    await expect(view.get_by_role("heading", name="Coastal trip")).to_be_visible()
    await expect(view.get_by_role("list", name="Messages").get_by_role("listitem")).to_have_count(2)
    await view.get_by_label("Title").fill("Coastal weekend")
    await view.get_by_label("Tags (comma-separated)").fill("travel, sea")
    await view.get_by_role("button", name="Save").click()
    await expect(view.get_by_role("status")).to_have_text("Saved.")
    await expect(view.get_by_role("heading", name="Coastal weekend")).to_be_visible()

    for format_name, expected in (("JSON", '"title": "Coastal weekend"'), ("Markdown", "Coastal weekend")):
        async with page.expect_download() as waiting:
            await view.get_by_role("button", name=f"Export {format_name}").click()
        saved = tmp_path / (await waiting.value).suggested_filename
        await (await waiting.value).save_as(saved)
        assert expected in saved.read_text() and "the cliff walk" in saved.read_text()

    await page.get_by_role("button", name="Clear search").click()
    await page.get_by_label("Tags", exact=True).fill("sea")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("Coastal weekend")

    async def accept(dialog: Dialog) -> None:
        await dialog.accept()

    page.on("dialog", accept)
    await view.get_by_role("button", name="Delete").click()
    await expect(page.get_by_text("Choose a conversation.")).to_be_visible()
    await page.get_by_label("Tags", exact=True).fill("")
    await expect(listed).to_have_count(1)
    await expect(listed).to_contain_text("Groceries")
    content = await page.content()
    assert "stranger" not in content.lower() and "secret" not in content
