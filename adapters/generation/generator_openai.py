"""A generator backed by any OpenAI-compatible chat-completions endpoint."""

from __future__ import annotations

import json
import time
from typing import Any

from adapters.generation.chat_completions import ChatModelAdapter, CompletionFailed, UnusableReply, json_object
from domain.artifact import MAX_DRAFT, GenerationStats
from domain.errors import InvalidCommand
from domain.layout import check_layout
from services.ports.generator import Generation, GenerationFailed, GenerationRequest, draft_of

SYSTEM_PROMPT = """You design user-interface layouts. A layout is a JSON tree of nodes. Every node is an object
with a non-empty string "type" (page, section, heading, text, image, button, list, list_item, form, input,
card, grid, chart, table, ...), an optional string "label" (the visible text), an optional string "id",
an optional "children" list of nodes, and any other attributes the component needs (level, alt, columns...).
The root is usually a "page". Keep the tree under 64 levels and 10000 nodes.
Reply with one JSON object and nothing else: {"layout": <the root node>, "draft": "<the layout as an indented
text outline, one node per line>"}."""

RETRY_PROMPT = (
    'That reply was not usable: {problem}. Reply again with only the JSON object {{"layout": ..., "draft": ...}}.'
)


def user_message(request: GenerationRequest) -> str:
    parts = [f"Request: {request.query}"]
    if request.base_layout is not None:
        parts.append("Refine this existing layout:\n" + json.dumps(request.base_layout, ensure_ascii=False))
        if request.refinement:
            parts.append(f"Refinement: {request.refinement}")
        if request.preserve_structure:
            parts.append(
                "Preserve the structure: keep every node's type and position; change only labels and attributes."
            )
        else:
            parts.append("You may add, remove or replace components.")
    parts.append(f"Style variety (0 = conventional, 1 = adventurous): {request.style_variety:.2f}")
    if request.variation_index is not None:
        parts.append(f"This is variation {request.variation_index}: make it distinct from the other variations.")
    return "\n\n".join(parts)


def parse_reply(content: str) -> tuple[dict[str, Any], str]:
    """The layout and draft in a model's reply, or UnusableReply saying what is wrong with it.
    The problem names only the kind of fault (and a field path), never the reply's content,
    so it can go into errors and logs as well as back to the model."""
    reply = json_object(content)
    if "layout" not in reply:
        raise UnusableReply('the reply had no "layout" key')
    try:
        check_layout(reply["layout"])
    except InvalidCommand as error:
        raise UnusableReply(f"the layout is invalid: {error.message}") from None
    draft = reply.get("draft")
    if not isinstance(draft, str) or not draft.strip() or len(draft) > MAX_DRAFT:
        draft = draft_of(reply["layout"])
    return reply["layout"], draft


class OpenAICompatibleGenerator(ChatModelAdapter):
    """Retries invalid replies (telling the model what was wrong), 429s, 5xxs and timeouts,
    up to `max_attempts` calls in all; any other refusal fails at once."""

    name = "openai"

    async def generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_message(request)}]
        try:
            answer = await self._chat.ask(
                messages,
                parse_reply,
                retry_prompt=RETRY_PROMPT,
                max_attempts=self._max_attempts,
                wanted="layout",
                model=request.model,
                temperature=request.temperature,
            )
        except CompletionFailed as failed:
            raise GenerationFailed(failed.message) from None
        layout, draft = answer.value
        stats = GenerationStats(
            attempts=answer.attempts,
            retries=answer.attempts - 1,
            tokens=answer.tokens,
            duration_ms=(time.perf_counter() - started) * 1000,
        )
        model = answer.model or request.model or self._chat.model
        return Generation(layout=layout, draft=draft, model=model, provider="openai-compatible", stats=stats)
