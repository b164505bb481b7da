"""The HITL inbox in Chromium: seed 004's error-recovery story answered by a person in the
browser while the orchestrator waits on the run; a second answer and an expired run show the
service's own message; another user's checkpoint never appears."""

from __future__ import annotations

import asyncio
import re
import uuid
from pathlib import Path

from chronicle_client.connection import ChronicleClient
from playwright.async_api import Page, Route, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory

REQUEST = "Make me a 1:1 sunset image"


async def conversation_of(client: ChronicleClient) -> object:
    started = await client.conversations.start(title="Sunset", tags=["hitl"])
    await client.conversations.add_message(started.conversation_id, "user", REQUEST)
    await client.conversations.add_message(started.conversation_id, "agent", "Generating a sunset at aspect ratio 16:9.")
    return started.conversation_id


async def test_error_recovery_answered_through_the_inbox_reaches_the_waiting_orchestrator(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority, tmp_path: Path,
) -> None:
    user, stranger_id = f"person-{uuid.uuid4().hex[:8]}", f"stranger-{uuid.uuid4().hex[:8]}"
    orchestrator, stranger = await connect(user), await connect(stranger_id)
    conversation_id = await conversation_of(orchestrator)
    await sign_in_with(page, console.url, authority.issue(user))
    await expect(page.get_by_role("status").filter(has_text="Live")).to_be_visible()

    secret = f"the stranger's own checkpoint {uuid.uuid4().hex}"
    await stranger.hitl.pause(await conversation_of(stranger), step="stranger_step", prompt=secret)
    error = "unsupported aspect ratio 16:9; supported: 1:1"
    prompt = f"The image API refused my request ({error}). Which aspect ratio should I use?"
    handle = await orchestrator.hitl.pause(
        conversation_id, step="generate_image", checkpoint_type="error_recovery", prompt=prompt,
        data={"error": error, "form": {"aspect_ratio": "16:9"}}, conversation_mode=True)
    waiting = asyncio.ensure_future(orchestrator.hitl.run(handle.run_id).wait_for_resume(timeout=60))

    # The pause appears in the open inbox without a reload.
    checkpoint = page.get_by_role("article")
    await expect(checkpoint.get_by_role("heading", name=prompt)).to_be_visible()
    await expect(checkpoint.locator(".facts")).to_contain_text("generate_image")
    await expect(checkpoint.locator(".facts")).to_contain_text("error_recovery")
    history = checkpoint.get_by_role("region", name="Conversation history")
    await expect(history).to_contain_text(REQUEST)
    await expect(history.locator(".message.hitl")).to_contain_text(prompt)  # the HITL exchange, marked
    await page.screenshot(path=str(tmp_path / "checkpoint.png"), full_page=True)

    await checkpoint.get_by_label("aspect_ratio").fill("1:1")
    await checkpoint.get_by_label("Feedback").fill("use 1:1")
    await checkpoint.get_by_role("button", name="Approve").click()

    answer = await waiting
    assert (answer.approved, answer.edits, answer.feedback) == (True, {"aspect_ratio": "1:1"}, "use 1:1")
    assert any(message.content == REQUEST and message.role == "user" for message in answer.history)
    await expect(page.get_by_role("status").filter(has_text="Approved")).to_contain_text("generate_image")
    await expect(page.get_by_role("heading", name=re.compile("Waiting on you"))).to_contain_text("(0)")
    assert secret not in await page.content()


async def test_a_second_answer_and_an_expired_run_show_the_service_message(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority,
) -> None:
    user = f"person-{uuid.uuid4().hex[:8]}"
    orchestrator = await connect(user)
    conversation_id = await conversation_of(orchestrator)
    answered = await orchestrator.hitl.pause(conversation_id, step="pick_colour", prompt="Which colour?")
    expiring = await orchestrator.hitl.pause(await conversation_of(orchestrator), step="pick_size", prompt="Which size?",
                                             expires_in=8)

    async def no_events(route: Route) -> None:
        await route.abort()

    # This page hears of no signal: it still shows what it listed, as a page would between
    # an answer given elsewhere and its stream catching up.
    await page.route("**/api/hitl/events", no_events)
    await sign_in_with(page, console.url, authority.issue(user))
    await expect(page.get_by_role("list", name="Open checkpoints").get_by_role("button")).to_have_count(2)

    await orchestrator.hitl.resume(answered.run_id, approved=True)  # answered in another tab
    await page.get_by_role("button", name=re.compile("Which colour")).click()
    await page.get_by_role("article").get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("alert")).to_contain_text(f"run {answered.run_id} was already resumed at")

    while (await orchestrator.hitl.get(expiring.run_id)).status == "paused":  # (the expiry sweeper's turn)
        await asyncio.sleep(0.2)
    await page.get_by_role("button", name=re.compile("Which size")).click()
    await page.get_by_role("article").get_by_role("button", name="Reject").click()
    await expect(page.get_by_role("alert")).to_contain_text(f"run {expiring.run_id} expired before it was resumed")
