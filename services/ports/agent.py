"""The agent port: what a job's phases ask an agent to plan, generate and validate, and how it fails."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from domain.job import Chunk


class JobSpec(BaseModel):
    """What the user asked for: the artifact type, their request text and its options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    artifact_type: str
    content: str
    options: dict[str, Any] = Field(default_factory=dict)


class AgentFailed(Exception):
    """No usable plan or result came back. The message never quotes the request, the chunks
    or the agent's output: all are user content, and this message reaches events and logs."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Agent(Protocol):
    """Every attempt of a job plans and generates from the same snapshot; `attempt` (from 1)
    lets a retry word things differently while the inputs stay the same."""

    name: str

    async def plan(self, spec: JobSpec, snapshot: list[Chunk]) -> dict[str, Any]: ...

    async def generate_from_plan(
        self, spec: JobSpec, plan: dict[str, Any], snapshot: list[Chunk], attempt: int
    ) -> dict[str, Any]: ...

    async def validate(self, spec: JobSpec, result: dict[str, Any]) -> list[str]:
        """The problems with a result (see domain.job_results.problems_with); [] when it is valid."""
        ...
