"""The generator port: what a layout generator is asked, what it gives back, how it fails."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from domain.artifact import MAX_QUERY, MAX_REFINEMENT, MAX_TEMPERATURE, GenerationStats
from domain.layout import walk


class GenerationRequest(BaseModel):
    """One layout to generate, or to refine when `base_layout` is given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query: str = Field(max_length=MAX_QUERY)
    model: str | None = None
    temperature: float = Field(default=0.7, ge=0, le=MAX_TEMPERATURE)
    base_layout: dict[str, Any] | None = None
    base_draft: str | None = None
    refinement: str | None = Field(default=None, max_length=MAX_REFINEMENT)
    preserve_structure: bool = False
    style_variety: float = Field(default=0.5, ge=0, le=1)
    variation_index: int | None = Field(default=None, ge=0)


class Generation(BaseModel):
    """A generated layout with its draft, who made it and what it cost."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    layout: dict[str, Any]
    draft: str
    model: str
    provider: str
    stats: GenerationStats


class GenerationFailed(Exception):
    """No usable layout came back. The message never quotes the prompt or the model's
    output: both are user content, and this message reaches logs and other callers."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Generator(Protocol):
    name: str

    async def generate(self, request: GenerationRequest) -> Generation: ...


def draft_of(layout: dict[str, Any]) -> str:
    """The layout as a text tree: one line per node, two spaces of indent per level."""
    lines = []
    for node, depth in walk(layout):
        label = node.get("label")
        lines.append("  " * (depth - 1) + node["type"] + (f": {label}" if label else ""))
    return "\n".join(lines)
