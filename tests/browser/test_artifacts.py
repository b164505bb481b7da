"""An artifact's lineage drawn as a tree in Chromium (ancestors and descendants; a node opens
its artifact), its draft and RAG influence; the drawing checked by its nodes and the SVG
paths of its edges, a screenshot saved."""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.async_api import Page, expect

from adapters.auth import TokenAuthority
from entrypoints.gateways.http_server import HttpServer
from tests.browser.conftest import sign_in_with
from tests.conftest import ClientFactory

LAYOUT = {"type": "page", "children": [{"type": "heading", "label": "Sunset"}, {"type": "image", "label": "sky"}]}


async def test_the_lineage_tree_is_drawn_and_its_nodes_open_their_artifacts(
    page: Page, console: HttpServer, connect: ClientFactory, authority: TokenAuthority, tmp_path: Path,
) -> None:
    user = f"maker-{uuid.uuid4().hex[:8]}"
    client = await connect(user)
    tag = uuid.uuid4().hex[:6]
    root = await client.artifacts.store(LAYOUT, query=f"sunset poster {tag}", draft="A poster of a sunset",
                                        rag_examples=[{"id": "example-1", "score": 0.92, "text": "an orange sky poster"}])
    child = await client.artifacts.store(LAYOUT, query=f"warmer sunset {tag}", parent_id=root.artifact_id)
    await client.artifacts.store(LAYOUT, query=f"sunset with birds {tag}", parent_id=child.artifact_id)
    await client.artifacts.store(LAYOUT, query=f"night sky {tag}", parent_id=root.artifact_id)
    assert len((await client.artifacts.lineage(root.artifact_id)).descendants) == 3  # (read at the writes' position)

    await sign_in_with(page, console.url, authority.issue(user))
    await page.get_by_role("link", name="Artifacts").click()
    await page.get_by_role("list", name="Your artifacts").get_by_role("button", name=f"warmer sunset {tag}").click()
    view = page.get_by_role("article")
    await expect(view.get_by_role("heading", name=f"warmer sunset {tag}")).to_be_visible()
    tree = view.get_by_role("figure", name="Lineage tree")
    await expect(tree.locator(".react-flow__node")).to_have_count(3)  # its parent, itself, its child
    await expect(tree.locator(".react-flow__edge path.react-flow__edge-path")).to_have_count(2)
    for edge in await tree.locator(".react-flow__edge path.react-flow__edge-path").all():
        assert (await edge.get_attribute("d") or "").startswith("M")  # a drawn line
    await expect(tree).to_contain_text("1 ancestors, 1 descendants")
    await tree.screenshot(path=str(tmp_path / "lineage.png"))

    await tree.locator(".react-flow__node").filter(has_text="gen 0").click()  # the root
    await expect(view.get_by_role("heading", name=f"sunset poster {tag}")).to_be_visible()
    await expect(tree.locator(".react-flow__node")).to_have_count(4)  # the root and its three descendants
    await expect(tree.locator(".react-flow__edge path.react-flow__edge-path")).to_have_count(3)
    await expect(view.locator(".draft")).to_have_text("A poster of a sunset")
    await expect(view.get_by_role("table")).to_contain_text("example-1")
    await expect(view.get_by_role("table")).to_contain_text("an orange sky poster")
