"""A client for any OpenAI-compatible chat-completions endpoint, asking for JSON and retrying what is worth it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx

Parsed = TypeVar("Parsed")


class CompletionFailed(Exception):
    """No usable reply. The message names only statuses and kinds of fault, never the prompt,
    the reply or the key, so callers can pass it on into their own errors and logs."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TransientFailure(CompletionFailed):
    """The endpoint, not the model, failed this attempt: worth another try."""


class UnusableReply(Exception):
    """Raised by a reply parser: `problem` goes back to the model, so it must not quote the reply."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


@dataclass(frozen=True)
class Completion:
    content: str
    tokens: int
    model: str | None  # as the endpoint reports it, when it does


@dataclass(frozen=True)
class Answer(Generic[Parsed]):
    value: Parsed
    attempts: int
    tokens: int  # over every attempt, the failed ones too
    model: str | None


class ChatCompletions:
    """One endpoint, model and key. The key lives only in the request headers, never in reprs."""

    def __init__(
        self,
        url: str,
        model: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        backoff_seconds: float = 0.5,
        client: httpx.AsyncClient | None = None,
    ):
        self.endpoint = url.rstrip("/") + "/chat/completions"
        self.model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}  # (a local server may want none)
        self._timeout = timeout
        self._backoff_seconds = backoff_seconds
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient()

    def __repr__(self) -> str:
        return f"ChatCompletions({self.endpoint!r}, model={self.model!r})"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def ask(
        self,
        messages: list[dict[str, str]],
        parse: Callable[[str], Parsed],
        *,
        retry_prompt: str,
        max_attempts: int,
        wanted: str,
        model: str | None = None,
        temperature: float,
    ) -> Answer[Parsed]:
        """Complete and parse, up to `max_attempts` calls in all: a reply `parse` refuses (with
        UnusableReply) is answered with `retry_prompt` naming the {problem}; 429s, 5xxs and
        timeouts are retried after a backoff; any other refusal fails at once."""
        messages = list(messages)
        max_attempts = max(1, max_attempts)
        tokens, last_problem = 0, ""
        for attempt in range(1, max_attempts + 1):
            try:
                reply = await self.complete(messages, model=model, temperature=temperature)
            except TransientFailure as error:
                last_problem = error.message
                if attempt < max_attempts:  # give a struggling endpoint a moment
                    await asyncio.sleep(self._backoff_seconds * 2 ** (attempt - 1))
                continue
            tokens += reply.tokens
            try:
                value = parse(reply.content)
            except UnusableReply as unusable:
                last_problem = unusable.problem
                messages += [
                    {"role": "assistant", "content": reply.content},
                    {"role": "user", "content": retry_prompt.format(problem=unusable.problem)},
                ]
                continue
            return Answer(value=value, attempts=attempt, tokens=tokens, model=reply.model)
        raise CompletionFailed(f"the model gave no valid {wanted} after {max_attempts} attempts (last: {last_problem})")

    async def complete(
        self, messages: list[dict[str, str]], *, model: str | None = None, temperature: float
    ) -> Completion:
        """One call asking for a JSON object; TransientFailure when another try may do better."""
        body = {
            "model": model or self.model,
            "temperature": temperature,
            "messages": messages,
            "response_format": {"type": "json_object"},
        }
        try:
            response = await self._client.post(self.endpoint, json=body, headers=self._headers, timeout=self._timeout)
        except httpx.TimeoutException:
            raise TransientFailure("the endpoint timed out") from None
        except httpx.TransportError:
            raise TransientFailure("the endpoint could not be reached") from None
        if response.status_code == 429 or response.status_code >= 500:
            raise TransientFailure(f"HTTP {response.status_code}")
        if response.status_code >= 400:
            # The body may quote the request back, so only the status is kept.
            raise CompletionFailed(f"the model endpoint refused the request (HTTP {response.status_code})")
        try:
            completion = response.json()
            content = completion["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise TransientFailure("the endpoint's reply was not a chat completion") from None
        usage = completion.get("usage")
        used = usage.get("total_tokens") if isinstance(usage, dict) else None
        reported = completion.get("model")
        return Completion(
            content=content if isinstance(content, str) else str(content),
            tokens=used if isinstance(used, int) and used >= 0 else 0,
            model=reported if isinstance(reported, str) and reported else None,
        )


def json_object(content: str) -> dict[str, Any]:
    """A reply's content as a JSON object, or UnusableReply (naming no content)."""
    try:
        reply = json.loads(content)
    except ValueError:
        reply = None
    if not isinstance(reply, dict):
        raise UnusableReply("the reply was not a JSON object")
    return reply


class ChatModelAdapter:
    """Base of an adapter that talks to a model through ChatCompletions: its client, its
    attempt budget, a repr without the key (so not in logs or tracebacks), and closing."""

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
        self._chat = ChatCompletions(url, model, api_key, timeout=timeout, backoff_seconds=backoff_seconds, client=client)
        self._max_attempts = max(1, max_attempts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._chat.endpoint!r}, model={self._chat.model!r})"

    async def aclose(self) -> None:
        await self._chat.aclose()
