"""The web console in a real browser: Debian's Chromium driven by Playwright's driver (the PyPI
package; no downloaded browser builds), against the REST gateway serving the console over a
running Chronicle. Screenshots go under each test's tmp dir."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

from adapters.auth import TokenAuthority
from adapters.embedded import free_port
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.console import with_console
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.local_sign_in import LocalSignIn
from entrypoints.gateways.rest import build_app
from tests.conftest import JWT_SECRET

CHROMIUM = os.environ.get("CHRONICLE_TEST_CHROMIUM", "/usr/bin/chromium")
LOCAL_USER = "console-local"


@pytest.fixture(scope="module")
async def console(chronicle: Chronicle) -> AsyncIterator[HttpServer]:
    """The REST gateway with the console, its loopback sign-in on (signing in LOCAL_USER)."""
    clients = UserClients(chronicle.nats_url, chronicle.settings.subject_prefix)
    sign_in = LocalSignIn(TokenAuthority(secret=JWT_SECRET), LOCAL_USER, 600)
    server = await HttpServer(with_console(build_app(clients), clients, sign_in), "127.0.0.1", free_port()).start()
    yield server
    await server.stop()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (./dev test does, as root)")
    async with async_playwright() as playwright:
        # (--no-sandbox: the tests may run as root, where Chromium's sandbox cannot start)
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        await browser.close()


@pytest.fixture
async def page(browser: Browser, tmp_path: Path) -> AsyncIterator[Page]:
    """A fresh browser context (its own sessionStorage); a screenshot of the end state is
    saved as `final.png` under the test's tmp dir, whatever the outcome. Anything the
    console's Content-Security-Policy blocked fails the test (a style or script it needs
    would be missing in every browser)."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    opened = await context.new_page()
    blocked: list[str] = []
    opened.on("console", lambda message: blocked.append(message.text) if "Content Security Policy" in message.text else None)
    yield opened
    await opened.screenshot(path=str(tmp_path / "final.png"), full_page=True)
    await context.close()
    assert blocked == [], f"the CSP blocked: {blocked}"


async def sign_in_with(page: Page, base: str, token: str) -> None:
    await page.goto(base + "/")
    await page.get_by_label("Bearer token").fill(token)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await page.get_by_role("button", name="Sign out").wait_for()
