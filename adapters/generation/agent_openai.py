"""An agent backed by any OpenAI-compatible chat-completions endpoint: JSON plans and results, checked locally."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from adapters.generation.chat_completions import ChatModelAdapter, CompletionFailed, UnusableReply, json_object
from domain.job import Chunk
from domain.job_results import ARTIFACT_TYPES, problems_with
from services.ports.agent import AgentFailed, JobSpec

LAYOUT_TREE = (
    'a JSON tree of nodes: each node an object with a non-empty string "type" (page, section, heading, text, '
    'image, button, list, card, form, input, ...), an optional string "label", an optional string "id" and an '
    'optional "children" list of nodes; the root is usually a "page"'
)
SHAPES = {
    "quiz": '{"title": string, "questions": [1 to 50 of {"question": string, "options": [2 to 8 distinct non-blank '
    'strings], "correct_answer": exactly one of the options, "explanation": non-blank string naming the sources used}]}',
    "summary": '{"title": string, "summary": non-blank string, "key_points": [1 to 20 non-blank strings]}',
    "layout": f'{{"layout": {LAYOUT_TREE}, "draft": the layout as an indented text outline, one node per line}}',
}
UNITS = {"quiz": "question", "summary": "key point", "layout": "section"}
PLAN_PROMPT = """You plan a {kind} from a user's request and numbered sources, before it is written.
Reply with one JSON object and nothing else: {{"artifact_type": "{kind}", "title": string, "outline": [one
{{"topic": string, "source": the id of the source it draws on, or null}} per {unit}], "sources": [ids of the sources
used]}}. Draw on the sources given, not on anything else. The finished {kind} will have this shape: {shape}"""
GENERATE_PROMPT = """You write a {kind} from a user's request, a plan and numbered sources, following the plan.
Reply with one JSON object and nothing else, of exactly this shape: {shape}"""
RETRY_PROMPT = "That reply was not usable: {problem}. Reply again with only the JSON object, in the shape asked for."


def sources_message(spec: JobSpec, snapshot: list[Chunk]) -> str:
    parts = [f"Request: {spec.content}", "Options: " + json.dumps(spec.options, ensure_ascii=False, default=str)]
    sources = [f"[{number}] (id {chunk.chunk_id}) {chunk.text}" for number, chunk in enumerate(snapshot, start=1)]
    parts.append("Sources:\n" + "\n".join(sources) if sources else "Sources: none; work from the request alone.")
    return "\n\n".join(parts)


def plan_of(content: str) -> dict[str, Any]:
    plan = json_object(content)
    if not isinstance(plan.get("outline"), list) or not plan["outline"]:
        raise UnusableReply('the plan needs a non-empty "outline" list')
    return plan


def result_parser(artifact_type: str) -> Callable[[str], dict[str, Any]]:
    def parse(content: str) -> dict[str, Any]:
        result = json_object(content)
        problems = problems_with(artifact_type, result)
        if problems:  # paths and rules only, so they can go back to the model and into errors alike
            raise UnusableReply("; ".join(problems[:5]))
        return result

    return parse


class OpenAIAgent(ChatModelAdapter):
    """Plans and generates through the model, retrying replies that are not valid JSON of the
    right shape (naming the problem back) up to `max_attempts` calls; validates without it."""

    name = "openai"

    def __init__(self, url: str, model: str, api_key: str, *, temperature: float = 0.4, **options: Any):
        super().__init__(url, model, api_key, **options)
        self._temperature = temperature


    async def plan(self, spec: JobSpec, snapshot: list[Chunk]) -> dict[str, Any]:
        kind = self._kind(spec)
        system = PLAN_PROMPT.format(kind=kind, unit=UNITS[kind], shape=SHAPES[kind])
        return await self._ask(system, sources_message(spec, snapshot), plan_of, "plan")

    async def generate_from_plan(
        self, spec: JobSpec, plan: dict[str, Any], snapshot: list[Chunk], attempt: int
    ) -> dict[str, Any]:
        kind = self._kind(spec)
        user = sources_message(spec, snapshot) + "\n\nPlan: " + json.dumps(plan, ensure_ascii=False, default=str)
        if attempt > 1:
            user += f"\n\nThis is attempt {attempt}: an earlier result was refused, so check every rule of the shape."
        return await self._ask(GENERATE_PROMPT.format(kind=kind, shape=SHAPES[kind]), user, result_parser(kind), kind)

    async def validate(self, spec: JobSpec, result: dict[str, Any]) -> list[str]:
        return problems_with(self._kind(spec), result)

    async def _ask(self, system: str, user: str, parse: Callable[[str], dict[str, Any]], wanted: str) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        try:
            answer = await self._chat.ask(
                messages,
                parse,
                retry_prompt=RETRY_PROMPT,
                max_attempts=self._max_attempts,
                wanted=wanted,
                temperature=self._temperature,
            )
        except CompletionFailed as failed:
            raise AgentFailed(failed.message) from None
        return answer.value

    @staticmethod
    def _kind(spec: JobSpec) -> str:
        if spec.artifact_type not in ARTIFACT_TYPES:
            raise AgentFailed(f"the agent makes only these artifact types: {', '.join(ARTIFACT_TYPES)}")
        return spec.artifact_type
