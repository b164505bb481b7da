"""An agent that needs no model: deterministic plans and results drawn from the snapshot's sentences."""

from __future__ import annotations

import random
import re
from itertools import cycle, islice
from typing import Any

from adapters.generation.generator_offline import significant_words
from adapters.generation.seeds import seed_of
from domain.job import Chunk
from domain.job_results import ARTIFACT_TYPES, problems_with
from services.ports.agent import AgentFailed, JobSpec
from services.ports.generator import draft_of

FALLBACK_TOPIC = "General knowledge about the request"
MAX_TOPIC = 300  # characters of a sentence kept as a topic
MAX_TITLE = 80
MAX_DISTRACTOR_POOL = 200  # words drawn on for wrong options; more would only slow a large snapshot down
# (option, default, most) for how many outline entries each type's plan holds.
OUTLINE_SIZE = {"quiz": ("num_questions", 5, 50), "summary": ("key_points", 5, 20), "layout": ("sections", 3, 8)}
CHOICES_BY_DIFFICULTY = {"easy": 3, "medium": 4, "hard": 6}
# Jobs recorded before seed 002's option names counted a quiz's questions as "questions".
LEGACY_OPTIONS = {"num_questions": "questions"}
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
# Multi-word, so they rarely collide with a single-word answer; there are enough for eight options.
STOCK_DISTRACTORS = (
    "None of these",
    "All of these",
    "Not stated in the sources",
    "Something else entirely",
    "It depends on the context",
    "Both of the first two",
    "Neither of the first two",
    "Impossible to say",
)
QUESTION_FORMS = ("Fill in the blank: {}", "Which word completes this statement? {}", "Complete the sentence: {}")
SUMMARY_LEADS = ("In short:", "Overall:", "The gist:")
SECTION_BODIES = ("text", "quote", "card")



def _sentences(text: str) -> list[str]:
    pieces = (" ".join(piece.split())[:MAX_TOPIC] for piece in SENTENCE_BREAK.split(text))
    return [piece for piece in pieces if significant_words(piece)]


def _title(content: str) -> str:
    return " ".join(content.split())[:MAX_TITLE].strip() or "Untitled"


def _whole(options: dict[str, Any], option: str, default: int, least: int, most: int) -> int:
    """An integer option clamped to its range; anything else (a bool, a string) counts as unset."""
    wanted = options.get(option, options.get(LEGACY_OPTIONS.get(option, option)))
    return max(least, min(most, wanted if type(wanted) is int else default))


def _distinct(candidates: list[str], count: int) -> list[str]:
    """The first `count` candidates that read differently (ignoring case and spacing)."""
    seen: set[str] = set()
    chosen: list[str] = []
    for candidate in candidates:
        key = candidate.strip().casefold()
        if key and key not in seen and len(chosen) < count:
            seen.add(key)
            chosen.append(candidate)
    return chosen


class OfflineAgent:
    """The same spec, snapshot, plan and attempt always give the same output; a later attempt
    blanks other words and orders options differently, and stays valid."""

    name = "offline"

    async def plan(self, spec: JobSpec, snapshot: list[Chunk]) -> dict[str, Any]:
        self._check(spec)
        wanted = set(significant_words(spec.content))
        ranked = sorted(snapshot, key=lambda chunk: (-chunk.score, chunk.chunk_id))
        found: list[tuple[str, str | None]] = [(s, chunk.chunk_id) for chunk in ranked for s in _sentences(chunk.text)]
        # Sentences that share the request's words come first; the sort is stable, so score order breaks ties.
        found.sort(key=lambda topic: -len(wanted & set(significant_words(topic[0]))))
        found = found or [(sentence, None) for sentence in _sentences(spec.content)] or [(FALLBACK_TOPIC, None)]
        option, default, most = OUTLINE_SIZE[spec.artifact_type]
        size = _whole(spec.options, option, default, 1, most)
        # A quiz asks for a number of questions, so topics repeat; key points and sections do not.
        chosen = islice(cycle(found), size) if spec.artifact_type == "quiz" else found[:size]
        outline = [{"topic": topic, "source": source} for topic, source in chosen]
        sources = [item["source"] for item in outline if item["source"] is not None]
        return {
            "artifact_type": spec.artifact_type,
            "title": _title(spec.content),
            "outline": outline,
            "sources": list(dict.fromkeys(sources)),
        }

    async def generate_from_plan(
        self, spec: JobSpec, plan: dict[str, Any], snapshot: list[Chunk], attempt: int
    ) -> dict[str, Any]:
        self._check(spec)
        chunks = [chunk.model_dump(mode="json") for chunk in snapshot]
        rng = random.Random(seed_of(("generate", spec.model_dump(mode="json"), plan, chunks, attempt)))
        known = {chunk.chunk_id for chunk in snapshot}
        outline = self._outline(plan, known)[: OUTLINE_SIZE[spec.artifact_type][2]]
        planned_title = plan.get("title")
        title = planned_title if isinstance(planned_title, str) and planned_title.strip() else _title(spec.content)
        if spec.artifact_type == "quiz":
            texts = [spec.content, *(chunk.text for chunk in snapshot)]
            words = list(dict.fromkeys(word for text in texts for word in significant_words(text)))
            words = words[:MAX_DISTRACTOR_POOL]
            by_difficulty = CHOICES_BY_DIFFICULTY.get(str(spec.options.get("difficulty", "medium")), 4)
            choices = _whole(spec.options, "choices", by_difficulty, 2, len(STOCK_DISTRACTORS))
            questions = [self._question(topic, source, words, choices, rng) for topic, source in outline]
            return {"title": title, "questions": questions}
        if spec.artifact_type == "summary":
            cited = [f"{topic} [{source}]" if source else topic for topic, source in outline]
            summary = " ".join([rng.choice(SUMMARY_LEADS), *(topic for topic, _ in outline[:3])])
            return {"title": title, "summary": summary, "key_points": cited}
        sections = [self._section(index, topic, source, rng) for index, (topic, source) in enumerate(outline)]
        layout = {"type": "page", "label": title, "children": sections}
        return {"layout": layout, "draft": draft_of(layout)}

    async def validate(self, spec: JobSpec, result: dict[str, Any]) -> list[str]:
        self._check(spec)
        return problems_with(spec.artifact_type, result)

    @staticmethod
    def _check(spec: JobSpec) -> None:
        if spec.artifact_type not in ARTIFACT_TYPES:
            raise AgentFailed(f"the offline agent makes only these artifact types: {', '.join(ARTIFACT_TYPES)}")

    @staticmethod
    def _outline(plan: dict[str, Any], known: set[str]) -> list[tuple[str, str | None]]:
        """The plan's topics with their sources; a plan from elsewhere may hold bare strings or stray ids."""
        outline_items = plan.get("outline")
        items: list[Any] = outline_items if isinstance(outline_items, list) else []
        outline = []
        for item in items:
            topic, source = (item.get("topic"), item.get("source")) if isinstance(item, dict) else (item, None)
            if isinstance(topic, str) and significant_words(topic):
                outline.append((topic[:MAX_TOPIC], source if isinstance(source, str) and source in known else None))
        return outline or [(FALLBACK_TOPIC, None)]

    @staticmethod
    def _question(topic: str, source: str | None, words: list[str], choices: int, rng: random.Random) -> dict[str, Any]:
        candidates = significant_words(topic)
        answer = rng.choice([word for word in candidates if len(word) > 3] or candidates)
        blank = re.compile(rf"(?<![^\W_]){re.escape(answer)}", re.IGNORECASE)
        blanked = blank.sub("_____", topic, count=1)
        question = (
            rng.choice(QUESTION_FORMS).format(blanked) if blanked != topic else f"Which term is key here? {topic}"
        )
        options = _distinct([answer, *rng.sample(words, len(words)), *STOCK_DISTRACTORS], choices)
        rng.shuffle(options)
        cited = f"Source {source} says" if source else "The request says"
        return {"question": question, "options": options, "correct_answer": answer, "explanation": f'{cited}: "{topic}"'}

    @staticmethod
    def _section(index: int, topic: str, source: str | None, rng: random.Random) -> dict[str, Any]:
        heading = " ".join(significant_words(topic)[:4]).title()
        body_type = rng.choice(SECTION_BODIES)
        body: dict[str, Any] = {"type": body_type, "label": topic}
        if body_type == "card":
            body = {"type": "card", "children": [{"type": "text", "label": topic}]}
        children = [{"type": "heading", "label": heading, "level": 2}, body]
        if source:
            children.append({"type": "button", "label": f"Open source {source}"})
        return {"type": "section", "label": heading, "id": f"section-{index + 1}", "children": children}
