"""Generation artifacts over NATS: store, generate, refine, variations, lineage, RAG, previews, search."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import uuid
from typing import Any

import pytest
from chronicle_client import ChronicleClient, ChronicleError

from tests.conftest import ClientFactory


def layout(*labels: str, kind: str = "section") -> dict[str, Any]:
    return {"type": "page", "children": [{"type": kind, "label": label} for label in labels]}


def chain(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "leaf"}
    for _ in range(depth - 1):
        node = {"type": "box", "children": [node]}
    return node


async def test_store_get_list_and_the_current_session(client: ChronicleClient) -> None:
    first = await client.artifacts.store(
        layout("hero", "pricing"),
        draft="page\n  section: hero",
        query="a landing page for tulips",
        model="m1",
        temperature=0.4,
        provider="p1",
        stats={"attempts": 2, "tokens": 120, "retries": 1, "duration_ms": 830.5},
        tags=["landing", "tulips"],
    )
    second = await client.artifacts.store(layout("faq"), query="faq page", stats={"tokens": 30}, parent_id=first.artifact_id)
    # No session named: both go to the caller's current session, opened on first use.
    assert second.session_id == first.session_id
    assert (first.generation, second.generation, second.parent_id) == (0, 1, first.artifact_id)

    got = await client.artifacts.get(first.artifact_id)
    assert got.layout == layout("hero", "pricing") and got.query == "a landing page for tulips"
    assert (got.model, got.temperature, got.provider) == ("m1", 0.4, "p1")
    assert got.stats.model_dump() == {"attempts": 2, "tokens": 120, "retries": 1, "duration_ms": 830.5}
    assert (got.node_count, got.depth, got.component_types) == (3, 2, {"page": 1, "section": 2})
    assert got.tags == ["landing", "tulips"] and got.origin == "stored"

    listed = await client.artifacts.list(session_id=first.session_id)
    assert [a.id for a in listed.items] == [second.artifact_id, first.artifact_id] and listed.total == 2
    assert [a.id for a in (await client.artifacts.list(parent_id=first.artifact_id)).items] == [second.artifact_id]
    assert [a.id for a in (await client.artifacts.list(tags=["tulips"])).items] == [first.artifact_id]

    await client.artifacts.tag(second.artifact_id, ["faq"])
    assert [a.id for a in (await client.artifacts.list(tags=["faq"])).items] == [second.artifact_id]

    session = await client.sessions.get(first.session_id)
    assert (session.kind, session.artifact_count, session.total_tokens) == ("generation", 2, 150)

    named = await client.sessions.create("campaign")
    third = await client.artifacts.store(layout("x"), session_id=named.session_id)
    assert third.session_id == named.session_id
    await client.sessions.close(named.session_id)
    with pytest.raises(ChronicleError) as closed:
        await client.artifacts.store(layout("y"), session_id=named.session_id)
    assert closed.value.code == "conflict"


async def test_a_closed_current_session_is_replaced(client: ChronicleClient) -> None:
    first = await client.artifacts.store(layout("a"))
    await client.sessions.close(first.session_id)
    second = await client.artifacts.store(layout("b"))
    assert second.session_id != first.session_id
    assert (await client.artifacts.store(layout("c"))).session_id == second.session_id


@pytest.mark.parametrize(
    ("fields", "field", "rule"),
    [
        ({"layout": {"children": []}}, "layout.type", "required"),
        ({"layout": {"type": "page", "children": {"type": "x"}}}, "layout.children", "type"),
        ({"layout": {"type": "page", "children": [{"type": "n"}] * 10_000}}, "layout", "max_nodes"),
        ({"layout": chain(65)}, "layout" + ".children[0]" * 64, "max_depth"),
        ({"layout": {"type": "page", "label": "x" * 1_000_001}}, "layout", "max_bytes"),
        ({"layout": layout("a"), "temperature": 2.5}, "temperature", "less_than_equal"),
        ({"layout": layout("a"), "temperature": True}, "temperature", "float_type"),  # (not 1.0)
        ({"layout": layout("a"), "temperature": "0.7"}, "temperature", "float_type"),
        ({"layout": layout("a"), "rag_examples": [{"id": "e", "score": 1}, {"id": "e", "score": 2}]}, "rag_examples[1].id", "unique"),
        ({"layout": layout("a"), "stats": {"tokens": -1}}, "stats.tokens", "greater_than_equal"),
        ({"layout": layout("a"), "colour": "red"}, "colour", "extra_forbidden"),
        ({"layout": layout("a"), "tags": [f"t{n}" for n in range(11)]}, "tags", "too_long"),
    ],
)
async def test_invalid_artifacts_are_refused_and_write_nothing(
    client: ChronicleClient, fields: dict[str, Any], field: str, rule: str
) -> None:
    payload = {"query": "refused", **fields}
    with pytest.raises(ChronicleError) as refused:
        # Sent raw: the client would refuse some of these before they left.
        reply = await client.request("cmd.artifact.store", payload)
        raise AssertionError(f"accepted: {reply}")
    assert refused.value.code == "invalid"
    assert any(d["field"] == field and d["rule"] == rule for d in refused.value.details), refused.value.details
    assert (await client.artifacts.list()).total == 0


async def test_a_json_integer_is_a_number(client: ChronicleClient) -> None:
    stored = await client.request("cmd.artifact.store", {"layout": layout("a"), "temperature": 1})
    client.observed(stored["position"])  # (read at its position: sent raw, the client did not see it)
    assert (await client.artifacts.get(stored["artifact_id"])).temperature == 1.0


async def test_at_the_limits_a_tree_is_accepted(client: ChronicleClient) -> None:
    wide = await client.artifacts.store({"type": "page", "children": [{"type": "n"}] * 9_999})
    deep = await client.artifacts.store(chain(64))
    assert (await client.artifacts.get(wide.artifact_id)).node_count == 10_000
    assert (await client.artifacts.get(deep.artifact_id)).depth == 64


async def test_parents_must_exist_and_be_the_callers(connect: ClientFactory) -> None:
    alice, bob = await connect(), await connect()
    alices = await alice.artifacts.store(layout("a"))
    for parent in (uuid.uuid4(), alices.artifact_id):
        with pytest.raises(ChronicleError) as missing:
            await bob.artifacts.store(layout("b"), parent_id=parent)
        assert missing.value.code == "not_found" and missing.value.fields == ["parent_id"]
    assert (await bob.artifacts.list()).total == 0


async def test_lineage_of_a_long_refinement_chain(client: ChronicleClient) -> None:
    length = int(os.environ.get("CHRONICLE_TEST_CHAIN", "1000"))
    ids = [(await client.artifacts.store(layout("v0"))).artifact_id]
    for n in range(1, length):
        ids.append((await client.artifacts.store(layout(f"v{n}"), parent_id=ids[-1])).artifact_id)
    last = await client.artifacts.lineage(ids[-1], direction="ancestors", depth=1000)
    assert [a.id for a in last.ancestors] == ids[-2::-1][:1000]
    assert [a.distance for a in last.ancestors][:3] == [1, 2, 3] and last.ancestors[-1].generation == length - 1 - len(last.ancestors)
    first = await client.artifacts.lineage(ids[0], direction="descendants", depth=1000)
    assert [a.id for a in first.descendants] == ids[1:1001] and not first.truncated
    middle = await client.artifacts.lineage(ids[10], depth=3)
    assert [a.id for a in middle.ancestors] == ids[9:6:-1] and [a.id for a in middle.descendants] == ids[11:14]


async def test_generate_refine_and_idempotent_retries(client: ChronicleClient) -> None:
    made = await client.artifacts.generate("a signup form for a tulip newsletter", temperature=0.3, idempotency_key="gen-1")
    assert made.provider == "offline" and made.stats.attempts == 1 and made.layout["type"]
    again = await client.artifacts.generate("a signup form for a tulip newsletter", temperature=0.3, idempotency_key="gen-1")
    assert again.artifact_id == made.artifact_id
    with pytest.raises(ChronicleError) as reused:
        await client.artifacts.generate("another request", idempotency_key="gen-1")
    assert reused.value.code == "conflict"

    kept = await client.artifacts.refine(made.artifact_id, "make the button say join now", preserve_structure=True)
    assert (kept.parent_id, kept.generation, kept.session_id) == (made.artifact_id, 1, made.session_id)
    changed = await client.artifacts.refine(made.artifact_id, "add a gallery of tulip photos")
    compared = await client.artifacts.compare([made.artifact_id, kept.artifact_id, changed.artifact_id])
    similarity = {(p.a, p.b): p.structural_similarity for p in compared.pairs}
    assert similarity[(made.artifact_id, kept.artifact_id)] == 1.0
    assert similarity[(made.artifact_id, changed.artifact_id)] < 1.0
    refined = await client.artifacts.get(kept.artifact_id)
    assert refined.origin == "refined" and refined.refinement == "make the button say join now"
    assert (await client.artifacts.list()).total == 3
    with pytest.raises(ChronicleError) as missing:
        await client.artifacts.refine(uuid.uuid4(), "anything")
    assert missing.value.code == "not_found" and missing.value.fields == ["artifact_id"]


async def test_variation_sets_under_concurrency(client: ChronicleClient) -> None:
    base = await client.artifacts.generate("dashboard for tulip sales")
    sets = await asyncio.gather(
        *(client.artifacts.variations(f"dashboard variant {n}", count=10, base_artifact_id=base.artifact_id) for n in range(4))
    )
    for made in sets:
        assert [m.index for m in made.members] == list(range(10))
        assert all(m.status == "stored" and m.artifact_id for m in made.members)
        temperatures = [m.temperature for m in made.members]
        assert temperatures[0] == 0.5 and temperatures[-1] == 1.0 and temperatures == sorted(temperatures)
        assert 0 < made.diversity <= 1
        assert {k: sorted(v) for k, v in made.rankings.items()} == {
            k: list(range(10)) for k in ("complexity", "depth", "component_variety")
        }
        got = await client.artifacts.variation_set(made.variation_set_id)
        assert got.members == made.members and got.diversity == made.diversity
        assert got.base_artifact_id == base.artifact_id
    fourth = sets[0].members[3].artifact_id
    assert fourth is not None
    one = await client.artifacts.get(fourth)
    assert (one.variation_set_id, one.variation_index, one.parent_id) == (sets[0].variation_set_id, 3, base.artifact_id)
    assert (await client.artifacts.list()).total == 41
    descendants = await client.artifacts.lineage(base.artifact_id, direction="descendants")
    assert len(descendants.descendants) == 40


@pytest.mark.parametrize(("fields", "field"), [
    ({"count": 0}, "count"), ({"count": 11}, "count"),
    ({"temperature_range": [0.2, 2.5]}, "temperature_range.1"),
    ({"style_variety": 2}, "style_variety"),
])
async def test_invalid_variation_requests(client: ChronicleClient, fields: dict[str, Any], field: str) -> None:
    with pytest.raises(ChronicleError) as refused:
        await client.request("cmd.artifact.variations", {"query": "q", **fields})
    assert refused.value.code == "invalid" and refused.value.fields == [field]


async def test_a_reversed_temperature_range_is_the_same_range(client: ChronicleClient) -> None:
    made = await client.request("cmd.artifact.variations", {"query": "q", "count": 2, "temperature_range": [0.9, 0.2]})
    assert [m["temperature"] for m in made["members"]] == [0.2, 0.9]


async def test_rag_cross_reference_both_ways(connect: ClientFactory) -> None:
    alice, bob = await connect(), await connect()
    examples = [{"id": "doc-7", "score": 0.91, "text": "tulips bloom in spring"}, {"id": "doc-3", "score": 0.42}]
    first = await alice.artifacts.store(layout("a"), rag_examples=examples)
    second = await alice.artifacts.store(layout("b"), rag_examples=[{"id": "doc-7", "score": 0.55}])
    await bob.artifacts.store(layout("c"), rag_examples=[{"id": "doc-7", "score": 0.99}])

    influence = await alice.artifacts.rag_influence(first.artifact_id)
    assert [(e.id, e.score, e.text) for e in influence.examples] == [
        ("doc-7", 0.91, "tulips bloom in spring"), ("doc-3", 0.42, None)
    ]
    influenced = await alice.artifacts.by_example("doc-7")
    assert [(i.artifact_id, i.score) for i in influenced.items] == [(first.artifact_id, 0.91), (second.artifact_id, 0.55)]
    assert [i.artifact_id for i in (await alice.artifacts.by_example("doc-3")).items] == [first.artifact_id]
    assert (await alice.artifacts.by_example("doc-unknown")).total == 0


async def test_previews_small_and_large_round_trip_byte_exact(client: ChronicleClient) -> None:
    made = await client.artifacts.store(layout("a"))
    small = os.urandom(10_000)
    large = os.urandom(5 * 1024 * 1024 + 123)
    await client.artifacts.cache_preview(made.artifact_id, small, style="thumb", format="png")
    cached = await client.artifacts.cache_preview(made.artifact_id, large, style="full", format="webp")
    assert cached.size == len(large)

    assert await client.artifacts.preview(made.artifact_id, style="full") == large
    assert await client.artifacts.preview(made.artifact_id, style="thumb", format="png") == small
    got = await client.artifacts.get(made.artifact_id, include_preview=True)
    assert {p.style: p.bytes() for p in got.previews} == {"thumb": small, "full": large}
    plain = await client.artifacts.get(made.artifact_id)
    assert [p.data for p in plain.previews] == [None, None] and plain.previews[1].size == len(large)
    assert [p.sha256 for p in plain.previews][1] == hashlib.sha256(large).hexdigest()

    # A retry with its key (uploading again under a new name) gets the first reply, records nothing.
    first = await client.artifacts.cache_preview(made.artifact_id, large, style="retry", idempotency_key="preview-1")
    again = await client.artifacts.cache_preview(made.artifact_id, large, style="retry", idempotency_key="preview-1")
    assert again.position == first.position is not None
    assert len([e for e in (await client.audit.events(made.artifact_id)) if e.type == "Artifact.PreviewCached"]) == 3

    with pytest.raises(ChronicleError) as mismatch:
        await client.request("cmd.artifact.cache_preview", {
            "artifact_id": str(made.artifact_id), "data": "aGVsbG8=", "sha256": "0" * 64,
        })
    assert mismatch.value.code == "invalid" and mismatch.value.fields == ["sha256"]
    with pytest.raises(ChronicleError) as gone:
        await client.request("cmd.artifact.cache_preview", {"artifact_id": str(made.artifact_id), "upload": "nothing-here"})
    assert gone.value.code == "not_found" and gone.value.fields == ["upload"], gone.value.details


async def test_an_upload_is_its_uploaders_alone(connect: ClientFactory) -> None:
    """Bob naming erin's upload finds nothing, and erin's own claim is not spoilt by him."""
    erin, bob = await connect(), await connect()
    erins = await erin.artifacts.store(layout("e"), query="erin's shop")
    bobs = await bob.artifacts.store(layout("b"), query="bob's shop")
    upload, data = uuid.uuid4().hex, os.urandom(1000)
    await erin.request("cmd.artifact.upload_part", {"upload": upload, "index": 0, "data": base64.b64encode(data).decode()})
    with pytest.raises(ChronicleError) as stolen:
        await bob.request("cmd.artifact.cache_preview", {"artifact_id": str(bobs.artifact_id), "upload": upload})
    assert stolen.value.code == "not_found" and stolen.value.fields == ["upload"]
    cached = await erin.request("cmd.artifact.cache_preview", {"artifact_id": str(erins.artifact_id), "upload": upload})
    assert cached["size"] == len(data)
    erin.observed(cached["position"])  # (a raw request: the typed client would note its position itself)
    assert await erin.artifacts.preview(erins.artifact_id) == data


async def test_search_ranks_query_matches_over_draft_matches(client: ChronicleClient) -> None:
    in_draft = await client.artifacts.store(layout("a"), query="a pricing table", draft="section: orchid gallery")
    in_query = await client.artifacts.store(layout("b"), query="orchid gallery page", draft="section: photos")
    await client.artifacts.store(layout("c"), query="contact form", draft="form: email")
    found = await client.artifacts.search("orchid gallery")
    assert [h.artifact_id for h in found.items] == [in_query.artifact_id, in_draft.artifact_id]
    assert "<mark>" in found.items[0].snippet and found.items[0].rank == 1
    assert (await client.artifacts.search("nothing matches zebra")).items == []


async def test_another_users_artifacts_are_not_found(connect: ClientFactory) -> None:
    alice, bob = await connect(), await connect()
    made = await alice.artifacts.store(layout("secret"), query="alice's secret plan", rag_examples=[{"id": "d1", "score": 1}])
    await alice.artifacts.cache_preview(made.artifact_id, b"png bytes")
    variations = await alice.artifacts.variations("alice variations", count=2)
    other = await bob.artifacts.store(layout("b"))
    attempts = [
        bob.artifacts.get(made.artifact_id),
        bob.artifacts.lineage(made.artifact_id),
        bob.artifacts.rag_influence(made.artifact_id),
        bob.artifacts.compare([made.artifact_id, other.artifact_id]),
        bob.artifacts.variation_set(variations.variation_set_id),
        bob.artifacts.preview(made.artifact_id),
        bob.artifacts.tag(made.artifact_id, ["mine"]),
        bob.artifacts.refine(made.artifact_id, "steal it"),
        bob.artifacts.cache_preview(made.artifact_id, b"overwrite"),
        bob.artifacts.variations("x", base_artifact_id=made.artifact_id),
    ]
    for attempt in attempts:
        with pytest.raises(ChronicleError) as hidden:
            await attempt
        assert hidden.value.code == "not_found"
    assert (await bob.artifacts.search("secret plan")).items == []
    assert (await bob.artifacts.by_example("d1")).total == 0
    assert [a.id for a in (await bob.artifacts.list()).items] == [other.artifact_id]


@pytest.mark.slow
async def test_a_twenty_mib_preview_works_and_one_byte_more_is_refused(client: ChronicleClient) -> None:
    made = await client.artifacts.store(layout("a"))
    limit = os.urandom(20 * 1024 * 1024)
    await client.artifacts.cache_preview(made.artifact_id, limit, style="print", format="tiff")
    assert await client.artifacts.preview(made.artifact_id, style="print") == limit
    with pytest.raises(ChronicleError) as too_big:
        await client.artifacts.cache_preview(made.artifact_id, limit + b"!", style="huge", format="tiff")
    assert too_big.value.code == "invalid" and too_big.value.fields == ["size"]
    assert [p.style for p in (await client.artifacts.get(made.artifact_id)).previews] == ["print"]
