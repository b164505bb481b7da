"""A generator that needs no model: deterministic layouts built from the query's words."""

from __future__ import annotations

import copy
import random
import re
import time
from typing import Any

from adapters.generation.seeds import seed_of
from domain.artifact import GenerationStats
from domain.errors import InvalidCommand
from domain.layout import MAX_NODES, check_layout, walk
from services.ports.generator import Generation, GenerationFailed, GenerationRequest, draft_of

DEFAULT_MODEL = "offline-layout-1"
STOP_WORDS = frozenset(
    "a an and any are as at be but by can do for from get give has have how i in into is it its let like make me"
    " my need new of on or our please show so some that the their them then there these this to up us use want"
    " we what when which will with would you your".split()
)
# Regular components first: a low-variety palette draws only from the front of this list.
COMPONENTS = ("heading", "text", "button", "image", "list", "card", "form", "chart", "table", "grid", "quote", "video")
LEAVES = ("heading", "text", "button", "image", "chart", "table", "quote", "video")
VERBS = ("Explore", "Start", "View", "Try", "Compare", "Join")
MAX_SECTIONS = 8
NODE_BUDGET = 260  # fresh layouts stay far inside the layout limits
LARGEST_COMPONENT = 22  # a grid of three cards that each hold a list
LABEL_LENGTH = 120


def significant_words(text: str) -> list[str]:
    words = (word[:40] for word in re.findall(r"[^\W_]+", text.lower()))
    return list(dict.fromkeys(word for word in words if word not in STOP_WORDS and len(word) > 1))[:24]


class _Builder:
    """Draws one layout's nodes from a seeded rng, within a node budget."""

    def __init__(self, rng: random.Random, words: list[str], request: GenerationRequest, budget: int):
        self.rng, self.words, self.budget = rng, words, budget
        # Temperature loosens the structure; style_variety widens the choice of components.
        self.looseness = min(1.0, request.temperature / 1.5)
        self.variety = (self.looseness + request.style_variety) / 2
        self.palette = COMPONENTS[: 3 + round(self.variety * (len(COMPONENTS) - 3))]

    def word(self) -> str:
        return self.rng.choice(self.words).title()

    def sentence(self) -> str:
        return " ".join(self.rng.choice(self.words) for _ in range(self.rng.randint(3, 8))).capitalize() + "."

    def label_for(self, kind: str) -> str:
        if kind == "text":
            return self.sentence()
        if kind == "button":
            return f"{self.rng.choice(VERBS)} {self.word().lower()}"
        return self.word()

    def node(self, kind: str, label: str | None = None, **attributes: Any) -> dict[str, Any]:
        self.budget -= 1
        node: dict[str, Any] = {"type": kind}
        if label:
            node["label"] = label[:LABEL_LENGTH]
        return node | attributes

    def component(self, kind: str) -> dict[str, Any]:
        if kind == "list":
            items = [self.node("list_item", self.word()) for _ in range(self.rng.randint(2, 3))]
            return self.node("list", self.word(), children=items)
        if kind == "form":
            fields = [self.node("input", self.word(), input_type=self.rng.choice(("text", "email", "number", "date")))]
            fields += [self.node("input", self.word(), input_type="text") for _ in range(self.rng.randint(0, 2))]
            return self.node("form", f"{self.word()} form", children=[*fields, self.node("button", "Submit")])
        if kind == "card":
            parts = [self.node("heading", self.word(), level=3), self.node("text", self.sentence())]
            if self.rng.random() < self.looseness:  # nesting deepens as the temperature rises
                parts.append(self.component("list"))
            return self.node("card", children=parts)
        if kind == "grid":
            columns = self.rng.randint(2, 3)
            return self.node("grid", columns=columns, children=[self.component("card") for _ in range(columns)])
        attributes: dict[str, object] = {"level": 2} if kind == "heading" else {}
        if kind == "chart":
            attributes = {"chart_type": self.rng.choice(("bar", "line", "pie", "area"))}
        if kind == "image":
            attributes = {"alt": f"{self.word()} illustration"}
        return self.node(kind, self.label_for(kind), **attributes)

    def pick(self, position: int) -> str:
        # At low variety sections repeat one template (heading, text, button), so they read alike.
        if self.rng.random() < self.variety:
            return self.rng.choice(self.palette)
        return COMPONENTS[position % 3]

    def section(self, index: int) -> dict[str, Any] | None:
        if self.budget < LARGEST_COMPONENT + 1:
            return None
        parts = []
        for position in range(2 + self.rng.randint(0, round(self.looseness * 3))):
            if self.budget < LARGEST_COMPONENT:
                break
            parts.append(self.component(self.pick(position)))
        return self.node(
            "section", self.words[index % len(self.words)].title(), id=f"section-{index + 1}", children=parts
        )



class OfflineGenerator:
    """The same request always gives the same layout; `variation_index` and the temperature
    are part of the request, so they change the seed and with it the layout."""

    name = "offline"

    async def generate(self, request: GenerationRequest) -> Generation:
        started = time.perf_counter()
        if request.base_layout is None:
            layout = self._fresh(request, random.Random(seed_of(request.model_dump(mode="json"))))
        else:
            # Checked before seeding: the seed is drawn from the request as JSON.
            base_nodes = check_layout(request.base_layout, field="base_layout").node_count
            layout = self._refined(request, random.Random(seed_of(request.model_dump(mode="json"))), room=MAX_NODES - base_nodes)
        try:
            shape = check_layout(layout)
        except InvalidCommand:  # only a base layout already near a limit can get here
            raise GenerationFailed("the refined layout would break the layout limits") from None
        words_in = len(request.query.split()) + len((request.refinement or "").split())
        return Generation(
            layout=layout,
            draft=draft_of(layout),
            model=request.model or DEFAULT_MODEL,
            provider="offline",
            stats=GenerationStats(
                attempts=1,
                retries=0,
                tokens=words_in + shape.node_count,
                duration_ms=(time.perf_counter() - started) * 1000,
            ),
        )

    def _fresh(self, request: GenerationRequest, rng: random.Random) -> dict[str, Any]:
        builder = _Builder(rng, significant_words(request.query) or ["content"], request, NODE_BUDGET)
        count = min(MAX_SECTIONS, 1 + round(builder.looseness * 4) + rng.randint(0, 1 + round(builder.looseness * 3)))
        sections = [builder.section(index) for index in range(count)]
        title = " ".join(request.query.split())[:LABEL_LENGTH] or "Untitled"
        return {"type": "page", "label": title, "children": [section for section in sections if section]}

    def _refined(self, request: GenerationRequest, rng: random.Random, room: int) -> dict[str, Any]:
        layout = copy.deepcopy(request.base_layout or {})
        words = significant_words(request.refinement or "") or significant_words(request.query) or ["refined"]
        builder = _Builder(rng, words, request, budget=min(60, room))
        labelled = [node for node, _ in walk(layout) if "label" in node] or [layout]
        chosen = [node for node in labelled if rng.random() < 0.3 + 0.4 * builder.looseness] or labelled[:1]
        for node in chosen:
            node["label"] = builder.label_for(node["type"])
        if request.preserve_structure:
            return layout
        leaves = [
            (node["children"], index)
            for node, _ in walk(layout)
            for index, child in enumerate(node.get("children", ()))
            if not child.get("children")
        ]
        for children, index in rng.sample(leaves, k=max(1, len(leaves) // 4) if leaves else 0):
            # Leaves are swapped for leaves, so no node gets deeper than the base allowed.
            kind = rng.choice([kind for kind in LEAVES if kind != children[index]["type"]])
            children[index] = builder.component(kind)
        section = builder.section(len(layout.get("children", ())))
        if section is not None:
            layout.setdefault("children", []).append(section)
        return layout
