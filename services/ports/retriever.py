"""The retriever port: what a job request asks for the content it will be written from.

A job captures what the retriever returns once, at request time (domain/job.py Chunk);
workers never ask again, so every attempt sees the same chunks.
"""

from __future__ import annotations

from typing import Protocol

from domain.job import Chunk


class Retriever(Protocol):
    # The read models it reads: a request that names a log position waits for them first.
    reads: list[str]

    async def capture(self, user: str, content: str, source_ids: list[str], limit: int) -> list[Chunk]: ...
