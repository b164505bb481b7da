"""The console at the gateway's root: served under a strict CSP with SPA fallback and /api
untouched; sign-in by pasted token or the loopback one-click; sign-out forgets the token."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from playwright.async_api import Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.console import CSP
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import LOCAL_USER, sign_in_with


async def test_the_bundle_is_served_at_the_root_with_fallback_and_api_untouched(console: HttpServer) -> None:
    async with httpx.AsyncClient(base_url=console.url) as http:
        root = await http.get("/")
        assert root.status_code == 200 and root.headers["content-security-policy"] == CSP
        assert '<div id="root">' in root.text
        deep = await http.get("/conversations/some-id")  # a client route: the app's page
        assert deep.status_code == 200 and deep.text == root.text
        script = next(part.split('"')[0] for part in root.text.split('src="')[1:])
        asset = await http.get(script)
        assert asset.status_code == 200 and "javascript" in asset.headers["content-type"]
        assert "immutable" in asset.headers["cache-control"]
        missing = await http.get("/api/no-such-route")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert (await http.get("/api/hitl/runs")).json()["error"]["code"] == "unauthorized"
        assert (await http.get("/manifest.json")).text == root.text  # (the manifest is not served)
        assert (await http.get("/../pyproject.toml")).text == root.text


async def test_paste_a_token_then_sign_out_forgets_it(page: Page, console: HttpServer, authority: TokenAuthority,
                                                      tmp_path: Path) -> None:
    user = f"paste-{uuid.uuid4().hex[:8]}"
    await sign_in_with(page, console.url, authority.issue(user))
    await expect(page.locator(".who")).to_have_text(f"signed in as {user}")
    await expect(page.get_by_role("heading", name="Waiting on you")).to_be_visible()
    await page.screenshot(path=str(tmp_path / "signed-in.png"))
    assert await page.evaluate("sessionStorage.length") == 1
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_label("Bearer token")).to_be_visible()
    assert await page.evaluate("sessionStorage.length") == 0
    await page.reload()
    await expect(page.get_by_label("Bearer token")).to_be_visible()


async def test_a_refused_token_shows_the_service_message(page: Page, console: HttpServer) -> None:
    await page.goto(console.url + "/")
    await page.get_by_label("Bearer token").fill("not-a-token")
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await expect(page.get_by_role("alert")).to_contain_text("JWT")
    assert await page.evaluate("sessionStorage.length") == 0


async def test_one_click_sign_in_on_this_machine(page: Page, console: HttpServer) -> None:
    await page.goto(console.url + "/")
    await page.get_by_role("button", name="Sign in on this machine").click()
    await expect(page.locator(".who")).to_have_text(f"signed in as {LOCAL_USER}")


async def test_one_click_sign_in_refuses_another_origin(console: HttpServer) -> None:
    """What a page of another site could send from the person's browser (CSRF) is refused."""
    async with httpx.AsyncClient(base_url=console.url) as http:
        refused = await http.post("/api/console/local-sign-in", headers={"Origin": "http://evil.example"})
        assert refused.status_code == 401 and refused.json()["error"]["details"][0]["rule"] == "origin"
        host = console.url.removeprefix("http://")
        accepted = await http.post("/api/console/local-sign-in", headers={"Origin": console.url, "Host": host})
        assert accepted.status_code == 200 and accepted.json()["userId"] == LOCAL_USER
