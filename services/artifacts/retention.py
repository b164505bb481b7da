"""Artifact retention: a scheduled sweep that removes artifacts past their age or their
session's limit by recording `Artifact.Removed` events (read models then drop them);
nothing is deleted behind the event store's back."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import psycopg
from chronicle_contract.artifacts import RemoveArtifact
from chronicle_contract.errors import ChronicleError

from services.ports.background import Background
from services.ports.positions import Positions
from services.ports.read_models import Queries
from services.runtime.command_bus import Execute

log = logging.getLogger(__name__)
SWEEP_BATCH = 500  # removals per query; a sweep repeats until nothing is due

# Artifacts older than the retention age.
TOO_OLD = """
SELECT id, owner FROM rm_artifacts.artifacts
WHERE created_at < now() - make_interval(secs => %(seconds)s) ORDER BY created_at LIMIT %(limit)s
"""
# The oldest artifacts of sessions holding more than the limit (the counts come from stats).
OVER_LIMIT = """
SELECT x.id, x.owner FROM rm_stats.sessions s
CROSS JOIN LATERAL (
    SELECT a.id, a.owner FROM rm_artifacts.artifacts a WHERE a.session_id = s.session_id
    ORDER BY a.created_at, a.id LIMIT s.artifact_count - %(max)s
) x
WHERE s.artifact_count > %(max)s LIMIT %(limit)s
"""


class RetentionSweeper(Background):
    name = "artifact-retention"

    def __init__(
        self,
        queries: Queries,
        positions: Positions,
        execute: Execute,
        *,
        retention_days: float,
        max_per_session: int,
        interval: float,
    ):
        super().__init__()
        self.queries = queries
        self.positions = positions
        self.execute = execute
        self.retention_days = retention_days
        self.max_per_session = max_per_session
        self.interval = interval

    async def sweep(self) -> int:
        """Remove everything due now; how many artifacts were removed."""
        removed = 0
        rules: list[tuple[str, dict[str, Any], str]] = []
        if self.retention_days > 0:
            seconds = self.retention_days * 86_400
            rules.append((TOO_OLD, {"seconds": seconds}, f"retention: older than {self.retention_days:g} days"))
        if self.max_per_session > 0:
            rules.append((OVER_LIMIT, {"max": self.max_per_session}, f"retention: session over {self.max_per_session} artifacts"))
        for statement, params, reason in rules:
            while due := await self.queries.fetch_all(statement, {**params, "limit": SWEEP_BATCH}):
                replies = await asyncio.gather(
                    *(self.execute(RemoveArtifact(artifact_id=row["id"], reason=reason), row["owner"])
                      for row in due)
                )
                removed += sum(1 for reply in replies if reply["removed"])
                # The read models drop what was removed once they apply the events: wait for
                # them before asking again, so the same artifacts are not picked twice.
                await self.positions.wait_for(["artifacts", "stats"], max(r.get("position") or 0 for r in replies), 30)
        return removed

    async def _run(self) -> None:
        while True:
            try:
                removed = await self.sweep()
                if removed:
                    log.info("retention removed artifacts", extra={"removed": removed})
            except asyncio.CancelledError:
                raise
            except psycopg.errors.UndefinedTable:
                pass  # the read models are still being built at first start
            except (ChronicleError, psycopg.Error) as error:
                log.warning("retention sweep failed; retrying", extra={"error_type": type(error).__name__})
            await asyncio.sleep(self.interval)
