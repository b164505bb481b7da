"""`chronicle artifacts show|tree`: one artifact's summary and its lineage drawn from the read models."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from chronicle_client.connection import ChronicleClient

from entrypoints.bootstrap import Chronicle
from services.artifacts import report


def layout(*labels: str) -> dict[str, Any]:
    return {"type": "page", "id": "home", "children": [{"type": "section", "label": label} for label in labels]}


async def test_show_summarises_an_artifact(chronicle: Chronicle, client: ChronicleClient) -> None:
    draft = "\n".join(f"line {n}" for n in range(50))
    root = await client.artifacts.store(
        layout("hero", "pricing", "faq"),
        draft=draft,
        query="a landing page for tulips",
        model="m1",
        provider="p1",
        temperature=0.4,
        stats={"attempts": 2, "tokens": 120, "retries": 1, "duration_ms": 1830.0},
        rag_examples=[{"id": "d1", "score": 0.5, "text": "tulips " * 40}, {"id": "d2", "score": 0.25}],
        tags=["landing", "tulips"],
    )
    preview = b"\x89PNG" + bytes(3000)
    await client.artifacts.cache_preview(root.artifact_id, preview, style="thumb", format="png")
    await client.artifacts.get(root.artifact_id)  # the read models have caught up with every write

    row = await report.load_artifact(chronicle.queries, root.artifact_id)
    assert row is not None
    text = report.render_artifact(row)
    assert text.splitlines()[0].startswith(f"artifact {root.artifact_id} (owner user-")
    for expected in (
        f"session     {root.session_id}",
        "parent      -",
        "generation  0, origin stored",
        "query       a landing page for tulips",
        "model       m1 via p1, temperature 0.4",
        "stats       2 attempts, 120 tokens, 1 retries, 1.8 s",
        "tags        landing, tulips",
        "shape       4 nodes, depth 2",
        "section 3, page 1",
        "RAG examples (2):",
        "  d1  score 0.5  tulips tulips",
        "  d2  score 0.25",
        f"  thumb  png  2.9 KiB  sha256 {hashlib.sha256(preview).hexdigest()[:12]}",
        "  line 0\n",
        "  line 39\n  … 10 more lines",
    ):
        assert expected in text, expected
    assert "line 40" not in text and "…" in text.split("d1  score 0.5")[1].splitlines()[0]


async def test_show_draws_the_layout_when_there_is_no_draft(chronicle: Chronicle, client: ChronicleClient) -> None:
    stored = await client.artifacts.store(layout("hero", "about"), query="no draft")
    await client.artifacts.get(stored.artifact_id)
    row = await report.load_artifact(chronicle.queries, stored.artifact_id)
    assert row is not None
    text = report.render_artifact(row)
    assert "previews: none" in text and "RAG examples: none" in text
    assert text.endswith("layout (no draft):\n  page #home\n    section  'hero'\n    section  'about'")
    assert await report.load_artifact(chronicle.queries, uuid.uuid4()) is None


async def test_tree_draws_the_path_and_the_descendants(chronicle: Chronicle, client: ChronicleClient) -> None:
    root = await client.artifacts.store(layout("a"), query="the root")
    middle = await client.artifacts.store(layout("b"), query="the middle", parent_id=root.artifact_id)
    made = await client.artifacts.variations("three takes", count=3, base_artifact_id=middle.artifact_id)
    # One transaction stores the set, so the takes share a timestamp and siblings come by id.
    first, second, third = sorted((m.artifact_id, m.index) for m in made.members if m.artifact_id is not None)
    leaf = await client.artifacts.store(layout("c"), query="a leaf\nwith two lines", parent_id=first[0])
    await client.artifacts.get(leaf.artifact_id)
    set_id = made.variation_set_id
    assert set_id is not None

    found = await report.load_tree(chronicle.queries, middle.artifact_id, 50)
    assert found is not None
    lines = report.render_tree(*found).splitlines()
    short = {i: i.hex[:8] for i in (root.artifact_id, middle.artifact_id, leaf.artifact_id)}
    take = {n: f'{i.hex[:8]}  gen 2  variation  "three takes"  set {set_id.hex[:8]} #{n}' for i, n in (first, second, third)}
    assert lines[0].startswith(f"lineage of artifact {middle.artifact_id} (owner user-")
    assert lines[1] == f'{short[root.artifact_id]}  gen 0  stored  "the root"'
    assert lines[2] == f'{short[middle.artifact_id]}  gen 1  stored  "the middle"  ◀'
    assert lines[3] == f"├── {take[first[1]]}"
    assert lines[4] == f'│   └── {short[leaf.artifact_id]}  gen 3  stored  "a leaf with two lines"'
    assert lines[5] == f"├── {take[second[1]]}"
    assert lines[6] == f"└── {take[third[1]]}"
    assert lines[7] == "1 ancestors, 4 descendants"

    found = await report.load_tree(chronicle.queries, middle.artifact_id, 1)
    assert found is not None
    lines = report.render_tree(*found).splitlines()
    assert [line[4:12] for line in lines[3:6]] == [i.hex[:8] for i, _ in (first, second, third)]
    assert lines[-1] == "1 ancestors, 3 descendants"
    assert await report.load_tree(chronicle.queries, uuid.uuid4(), 50) is None


async def test_tree_keeps_long_chains_and_wide_trees_readable(chronicle: Chronicle, client: ChronicleClient) -> None:
    parent = None
    chain = []
    for n in range(14):
        stored = await client.artifacts.store(layout("x"), query=f"step {n}", parent_id=parent)
        chain.append(stored.artifact_id)
        parent = stored.artifact_id
    children = await asyncio.gather(
        *(client.artifacts.store(layout("y"), query=f"child {n}", parent_id=parent) for n in range(report.PRINTED_DESCENDANTS + 7))
    )
    await client.artifacts.get(children[-1].artifact_id)

    found = await report.load_tree(chronicle.queries, chain[-1], 50)
    assert found is not None
    lines = report.render_tree(*found).splitlines()
    assert [line.split()[0] for line in lines[1:6]] == [i.hex[:8] for i in chain[:5]]
    assert lines[6] == "… 3 more …"
    assert [line.split()[0] for line in lines[7:13]] == [i.hex[:8] for i in chain[8:]]
    assert lines[12].endswith("◀")
    assert sum(line.startswith("├── ") for line in lines) == report.PRINTED_DESCENDANTS
    assert lines[-2:] == ["└── … 7 more", f"13 ancestors, {report.PRINTED_DESCENDANTS + 7} descendants (500 shown)"]

    shallow = await report.load_tree(chronicle.queries, chain[-2], 2)
    assert shallow is not None
    shown = report.render_tree(*shallow).splitlines()
    assert shown[1] == "… older ancestors beyond --depth" and shown[2].split()[0] == chain[-4].hex[:8]


async def test_the_cli_prints_the_tree_and_refuses_bad_ids(
    chronicle: Chronicle, client: ChronicleClient, tmp_path: Path
) -> None:
    root = await client.artifacts.store(layout("a"), query="cli root")
    child = await client.artifacts.store(layout("b"), query="cli child", parent_id=root.artifact_id)
    await client.artifacts.get(child.artifact_id)
    env = {
        **os.environ,
        "CHRONICLE_DATABASE_URL": chronicle.target.url or "",
        "CHRONICLE_NATS_URL": chronicle.nats_url,
        "CHRONICLE_DATA_DIR": str(tmp_path),
    }

    def chronicle_cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "entrypoints.cli", "artifacts", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    tree = await asyncio.to_thread(chronicle_cli, "tree", str(root.artifact_id))
    assert tree.returncode == 0, tree.stderr
    assert f'{root.artifact_id.hex[:8]}  gen 0  stored  "cli root"  ◀' in tree.stdout
    assert f'└── {child.artifact_id.hex[:8]}  gen 1  stored  "cli child"' in tree.stdout
    shown = await asyncio.to_thread(chronicle_cli, "show", str(child.artifact_id))
    assert shown.returncode == 0 and f"parent      {root.artifact_id}" in shown.stdout
    bad = await asyncio.to_thread(chronicle_cli, "tree", "not-a-uuid")
    assert bad.returncode != 0 and "'not-a-uuid' is not an artifact id (a UUID)" in bad.stderr
    unknown = uuid.uuid4()
    missing = await asyncio.to_thread(chronicle_cli, "show", str(unknown))
    assert missing.returncode != 0 and f"artifact {unknown} not found" in missing.stderr
