"""A generator backed by any OpenAI-compatible chat-completions endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from domain.artifact import MAX_DRAFT, GenerationStats
from domain.errors import InvalidCommand
from domain.layout import check_layout
from services.generator import Generation, GenerationFailed, GenerationRequest, draft_of

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


class _Transient(Exception):
    """The endpoint, not the model, failed this attempt: worth another try."""


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


def parse_reply(content: Any) -> tuple[dict[str, Any], str] | str:
    """The layout and draft in a model's reply, or what is wrong with it. The problem names
    only the kind of fault (and a field path), never the reply's content, so it can go into
    errors and logs as well as back to the model."""
    try:
        reply = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        return "the reply was not a JSON object"
    if "layout" not in reply:
        return 'the reply had no "layout" key'
    try:
        check_layout(reply["layout"])
    except InvalidCommand as error:
        return f"the layout is invalid: {error.message}"
    draft = reply.get("draft")
    if not isinstance(draft, str) or not draft.strip() or len(draft) > MAX_DRAFT:
        draft = draft_of(reply["layout"])
    return reply["layout"], draft


class OpenAICompatibleGenerator:
    """Retries invalid replies (telling the model what was wrong), 429s, 5xxs and timeouts,
    up to `max_attempts` calls in all; any other refusal fails at once."""

    name = "openai"

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str,
        *,
        max_attempts: int = 3,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
        backoff_seconds: float = 0.5,
    ):
        self._endpoint = url.rstrip("/") + "/chat/completions"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._max_attempts = max(1, max_attempts)
        self._timeout = timeout
        self._backoff_seconds = backoff_seconds
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient()

    def __repr__(self) -> str:  # the key stays out of reprs, and so out of logs and tracebacks
        return f"OpenAICompatibleGenerator({self._endpoint!r}, model={self._model!r})"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user_message(request)}]
        tokens, last_problem = 0, ""
        for attempt in range(1, self._max_attempts + 1):
            try:
                reply = await self._complete(request, messages)
            except _Transient as error:
                last_problem = str(error)
                if attempt < self._max_attempts:  # give a struggling endpoint a moment
                    await asyncio.sleep(self._backoff_seconds * 2 ** (attempt - 1))
                continue
            tokens += reply["tokens"]
            parsed = parse_reply(reply["content"])
            if isinstance(parsed, str):
                last_problem = parsed
                messages += [
                    {"role": "assistant", "content": str(reply["content"])},
                    {"role": "user", "content": RETRY_PROMPT.format(problem=parsed)},
                ]
                continue
            layout, draft = parsed
            stats = GenerationStats(
                attempts=attempt, retries=attempt - 1, tokens=tokens, duration_ms=(time.perf_counter() - started) * 1000
            )
            model = reply["model"] or request.model or self._model
            return Generation(layout=layout, draft=draft, model=model, provider="openai-compatible", stats=stats)
        raise GenerationFailed(
            f"the model gave no valid layout after {self._max_attempts} attempts (last: {last_problem})"
        )

    async def _complete(self, request: GenerationRequest, messages: list[dict[str, str]]) -> dict[str, Any]:
        body = {
            "model": request.model or self._model,
            "temperature": request.temperature,
            "messages": messages,
            "response_format": {"type": "json_object"},
        }
        try:
            response = await self._client.post(self._endpoint, json=body, headers=self._headers, timeout=self._timeout)
        except httpx.TimeoutException:
            raise _Transient("the endpoint timed out") from None
        except httpx.TransportError:
            raise _Transient("the endpoint could not be reached") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise _Transient(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            # The body may quote the request back, so only the status is kept.
            raise GenerationFailed(f"the model endpoint refused the request (HTTP {response.status_code})")
        try:
            completion = response.json()
            content = completion["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise _Transient("the endpoint's reply was not a chat completion") from None
        usage = completion.get("usage") or {}
        used = usage.get("total_tokens") if isinstance(usage, dict) else None
        model = completion.get("model")
        return {
            "content": content,
            "tokens": used if isinstance(used, int) and used >= 0 else 0,
            "model": model if isinstance(model, str) and model else None,
        }
