"""The audit section in Chromium: a conversation's timeline with each event's chain hash, the
conversation's state at an earlier version (its title before a rename), and its hash chain
verified by the service: holding, then broken where a stored event was changed."""

from __future__ import annotations

import re
import uuid

from playwright.async_api import Page, expect

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory
from tests.tampering import flipped_byte


async def test_a_timeline_and_a_state_at_an_earlier_version(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    user = f"audited-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    before, after = f"Before {uuid.uuid4().hex[:6]}", f"After {uuid.uuid4().hex[:6]}"
    conversation = (await client.conversations.start(title=before)).conversation_id
    await client.conversations.add_message(conversation, "user", "first")
    await client.conversations.update(conversation, title=after)
    assert (await client.conversations.get(conversation)).title == after  # (read at the writes' position)

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Audit").click()
    await page.get_by_label("Conversation or session id").fill(str(conversation))
    await page.get_by_role("button", name="Show timeline").click()
    timeline = page.get_by_role("region", name="Timeline")
    await expect(timeline.get_by_role("status")).to_contain_text("every event carries its chain hash")
    rows = timeline.get_by_role("row")
    assert await rows.count() >= 4  # the header, the start, the message, the rename
    await timeline.get_by_role("button", name=re.compile(r"^State of \w+ at version 1$")).first.click()
    state = page.get_by_role("region", name="State at version")
    await expect(state).to_contain_text("at version 1")
    await expect(state.locator("pre")).to_contain_text(before)
    assert after not in await state.locator("pre").inner_text()


async def test_another_user_is_refused_the_timeline_and_an_auditor_sees_it(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    owner = await connect(f"owner-{uuid.uuid4().hex[:8]}")
    conversation = (await owner.conversations.start(title="Owned")).conversation_id
    content = f"owner's words {uuid.uuid4().hex}"
    await owner.conversations.add_message(conversation, "user", content)
    assert (await owner.conversations.get(conversation)).message_count == 1

    async def timeline_as(token: str) -> None:
        await sign_in_with(page, console.url, token)
        await page.get_by_role("link", name="Audit").click()
        await page.get_by_label("Conversation or session id").fill(str(conversation))
        await page.get_by_role("button", name="Show timeline").click()

    await timeline_as(authority.issue(f"stranger-{uuid.uuid4().hex[:8]}"))
    await expect(page.get_by_role("alert")).to_be_visible()  # the service's refusal, in its words
    await expect(page.get_by_role("region", name="Timeline")).to_have_count(0)
    await page.get_by_role("button", name="Sign out").click()

    await timeline_as(authority.issue(f"auditor-{uuid.uuid4().hex[:8]}", claims={"roles": ["auditor"]}))
    await expect(page.get_by_role("region", name="Timeline").get_by_role("status")).to_contain_text("events")
    assert content not in await page.content()  # (the timeline lists events, not their content)


async def test_the_chain_holds_and_a_changed_event_shows_as_a_break_at_its_version(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority, chronicle: Chronicle,
) -> None:
    user = f"verified-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    conversation = (await client.conversations.start(title="Chained")).conversation_id
    for n in range(3):
        await client.conversations.add_message(conversation, "user", f"message {n}")
    assert (await client.conversations.get(conversation)).message_count == 3

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Audit").click()
    await page.get_by_label("Conversation or session id").fill(str(conversation))
    await page.get_by_role("button", name="Show timeline").click()
    chains = page.get_by_role("region", name="Chain verification")
    name = f"Conversation {str(conversation)[:8]}"
    row = chains.get_by_role("row", name=re.compile(name))
    await expect(row).to_contain_text("not checked")
    await chains.get_by_role("button", name=f"Verify the chain of {name}").click()
    await expect(row).to_contain_text("holds, 4 events checked")

    with flipped_byte(chronicle.target, conversation, 2):
        await chains.get_by_role("button", name=f"Verify again the chain of {name}").click()
        await expect(row).to_contain_text("broken at version 2 (hash mismatch), 4 events checked")
