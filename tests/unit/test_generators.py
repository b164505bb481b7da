"""The offline generator's determinism and knobs, and the OpenAI adapter against a scripted endpoint."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from statistics import mean

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from adapters.generation.generator_offline import OfflineGenerator
from adapters.generation.generator_openai import OpenAICompatibleGenerator
from domain.errors import InvalidCommand
from domain.layout import MAX_NODES, check_layout, diversity, shape_of, similarity, walk
from services.ports.generator import GenerationFailed, GenerationRequest, draft_of
from tests.unit.chat_endpoint import HANG, ScriptedEndpoint, completion
from tests.unit.chat_endpoint import scripted_endpoint as scripted_endpoint  # the `endpoint` fixture

QUERIES = [
    "A landing page for a coffee subscription with pricing and testimonials",
    "Dashboard showing sales by region, recent orders and a customer search",
    "Sign-up flow for a yoga studio: classes, teachers, schedule",
    "Recipe site with ingredients, steps and ratings",
    "Portfolio for a photographer",
]
offline = OfflineGenerator()


def test_requests_refuse_unknown_fields_and_out_of_range_knobs() -> None:
    with pytest.raises(ValidationError):
        GenerationRequest(query="q", colour="red")  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        GenerationRequest(query="q", style_variety=1.5)


def test_draft_of_is_an_indented_text_tree() -> None:
    layout = {
        "type": "page",
        "label": "Home",
        "children": [{"type": "section", "children": [{"type": "button", "label": "Go"}]}],
    }
    assert draft_of(layout) == "page: Home\n  section\n    button: Go"


async def test_offline_is_deterministic() -> None:
    request = GenerationRequest(query=QUERIES[0], temperature=0.9, variation_index=2)
    first, second = await offline.generate(request), await OfflineGenerator().generate(request)
    assert first.model_dump(exclude={"stats"}) == second.model_dump(exclude={"stats"})
    assert first.stats.tokens == second.stats.tokens > 0
    assert (first.model, first.provider, first.stats.attempts, first.stats.retries) == (
        "offline-layout-1",
        "offline",
        1,
        0,
    )
    assert first.draft == draft_of(first.layout)


async def test_temperature_and_variation_index_change_the_layout() -> None:
    layouts = [
        (await offline.generate(GenerationRequest(query=QUERIES[1], variation_index=n))).layout for n in range(4)
    ]
    assert diversity(layouts) > 0
    assert len({json.dumps(layout, sort_keys=True) for layout in layouts}) == 4
    cool, warm = [await offline.generate(GenerationRequest(query=QUERIES[1], temperature=t)) for t in (0.2, 1.4)]
    assert cool.layout != warm.layout
    assert (await offline.generate(GenerationRequest(query=QUERIES[1], model="mine"))).model == "mine"


async def test_higher_temperature_gives_more_component_variety() -> None:
    async def variety(temperature: float) -> float:
        shapes = [
            shape_of(
                (
                    await offline.generate(GenerationRequest(query=query, temperature=temperature, variation_index=n))
                ).layout
            )
            for query in QUERIES
            for n in range(3)
        ]
        return mean(shape.component_variety for shape in shapes)

    assert await variety(0.1) < await variety(0.8) < await variety(1.6)


@settings(max_examples=60, deadline=None)
@given(
    query=st.text(max_size=300),
    temperature=st.floats(0, 2),
    style_variety=st.floats(0, 1),
    variation_index=st.none() | st.integers(0, 1_000),
)
async def test_offline_output_is_always_a_valid_modest_layout(
    query: str, temperature: float, style_variety: float, variation_index: int | None
) -> None:
    request = GenerationRequest(
        query=query, temperature=temperature, style_variety=style_variety, variation_index=variation_index
    )
    generation = await offline.generate(request)
    shape = check_layout(generation.layout)
    assert shape.node_count <= 300 and shape.depth <= 8
    refined = await offline.generate(request.model_copy(update={"base_layout": generation.layout, "refinement": query}))
    check_layout(refined.layout)


async def test_refining_with_preserve_structure_keeps_every_node_type_in_place() -> None:
    base = await offline.generate(GenerationRequest(query=QUERIES[0], temperature=0.9))
    request = GenerationRequest(query=QUERIES[0], base_layout=base.layout, refinement="warmer autumn colours")
    kept = await offline.generate(request.model_copy(update={"preserve_structure": True}))
    assert similarity(base.layout, kept.layout) == 1.0
    assert [node["type"] for node, _ in walk(kept.layout)] == [node["type"] for node, _ in walk(base.layout)]
    assert kept.layout != base.layout  # labels took the refinement's words
    changed = await offline.generate(request)
    assert similarity(base.layout, changed.layout) < 1.0


async def test_an_invalid_base_layout_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidCommand) as refused:
        await offline.generate(GenerationRequest(query="q", base_layout={"children": []}, refinement="r"))
    assert refused.value.field is not None and refused.value.field.startswith("base_layout")


async def test_refining_a_full_tree_stays_within_the_node_limit() -> None:
    full = {"type": "page", "children": [{"type": "text", "label": "x"}] * (MAX_NODES - 1)}
    refined = await offline.generate(GenerationRequest(query="q", base_layout=full, refinement="more sections"))
    assert check_layout(refined.layout).node_count <= MAX_NODES


VALID = {"type": "page", "label": "Shop", "children": [{"type": "button", "label": "Buy"}]}


@pytest.fixture
async def openai(endpoint: ScriptedEndpoint) -> AsyncIterator[OpenAICompatibleGenerator]:
    generator = OpenAICompatibleGenerator(endpoint.url, "gpt-test", "sk-test-key", timeout=0.2, backoff_seconds=0.01)
    yield generator
    await generator.aclose()


async def test_an_invalid_reply_is_retried_with_the_problem_named(
    endpoint: ScriptedEndpoint, openai: OpenAICompatibleGenerator
) -> None:
    endpoint.script = [
        completion("this is not json {", 7),
        completion(json.dumps({"layout": VALID, "draft": "shop"}), 11),
    ]
    generation = await openai.generate(GenerationRequest(query="a shop", temperature=0.3))
    assert (generation.layout, generation.draft) == (VALID, "shop")
    assert (generation.model, generation.provider) == ("scripted-model", "openai-compatible")
    assert (generation.stats.attempts, generation.stats.retries, generation.stats.tokens) == (2, 1, 18)
    headers, body = endpoint.requests[0]
    assert headers["authorization"] == "Bearer sk-test-key"
    assert (body["model"], body["temperature"], body["response_format"]) == ("gpt-test", 0.3, {"type": "json_object"})
    assert [message["role"] for message in body["messages"]] == ["system", "user"]
    assert "a shop" in body["messages"][1]["content"]
    follow_up = endpoint.requests[1][1]["messages"]
    assert [message["role"] for message in follow_up] == ["system", "user", "assistant", "user"]
    assert "not a JSON object" in follow_up[-1]["content"]


async def test_a_reply_without_a_draft_gets_one_drawn_from_the_layout(
    endpoint: ScriptedEndpoint, openai: OpenAICompatibleGenerator
) -> None:
    endpoint.script = [completion(json.dumps({"layout": VALID}), 5)]
    generation = await openai.generate(GenerationRequest(query="a shop"))
    assert generation.draft == draft_of(VALID)


async def test_always_invalid_replies_fail_after_max_attempts(
    endpoint: ScriptedEndpoint, openai: OpenAICompatibleGenerator
) -> None:
    endpoint.script = [completion(json.dumps({"layout": {"label": "secret user text"}}), 5)]
    with pytest.raises(GenerationFailed) as raised:
        await openai.generate(GenerationRequest(query="private query"))
    assert len(endpoint.requests) == 3
    assert "after 3 attempts" in raised.value.message
    assert "secret" not in raised.value.message and "private" not in raised.value.message


async def test_server_errors_and_timeouts_are_retried(
    endpoint: ScriptedEndpoint, openai: OpenAICompatibleGenerator
) -> None:
    endpoint.script = [(500, {"error": "down"}), HANG, completion(json.dumps({"layout": VALID, "draft": "d"}), 4)]
    generation = await openai.generate(GenerationRequest(query="a shop"))
    assert generation.layout == VALID
    assert (generation.stats.attempts, generation.stats.tokens, len(endpoint.requests)) == (3, 4, 3)


async def test_a_refused_request_fails_at_once(endpoint: ScriptedEndpoint, openai: OpenAICompatibleGenerator) -> None:
    endpoint.script = [(401, {"error": {"message": "bad key sk-test-key"}})]
    with pytest.raises(GenerationFailed) as raised:
        await openai.generate(GenerationRequest(query="a shop"))
    assert len(endpoint.requests) == 1
    assert "401" in raised.value.message and "sk-test" not in raised.value.message


async def test_a_refinement_carries_the_base_layout(
    endpoint: ScriptedEndpoint, openai: OpenAICompatibleGenerator
) -> None:
    endpoint.script = [completion(json.dumps({"layout": VALID, "draft": "d"}), 3)]
    request = GenerationRequest(query="a shop", base_layout=VALID, refinement="make it red", preserve_structure=True)
    await openai.generate(request.model_copy(update={"model": "gpt-other"}))
    body = endpoint.requests[0][1]
    prompt = body["messages"][1]["content"]
    assert body["model"] == "gpt-other"
    assert json.dumps(VALID) in prompt and "make it red" in prompt and "Preserve the structure" in prompt
