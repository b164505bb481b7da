"""The read models Chronicle keeps, and the projection engine that keeps them, as settings configure them."""

from __future__ import annotations

from typing import Any

from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from projections.artifacts import ArtifactsProjection
from projections.audit import AuditProjection
from projections.base import Projection
from projections.engine import ProjectionEngine
from projections.history import HistoryProjection
from projections.hitl import HitlProjection
from projections.jobs import JobsProjection
from projections.lineage import LineageProjection
from projections.optimizations import OptimizationsProjection
from projections.search import SearchProjection
from projections.stats import StatsProjection
from services.entrypoints.settings import Settings

PROJECTIONS: list[type[Projection]] = [
    HistoryProjection,
    StatsProjection,
    SearchProjection,
    HitlProjection,
    OptimizationsProjection,
    LineageProjection,
    AuditProjection,
    ArtifactsProjection,
    JobsProjection,
]


def projection_options(settings: Settings, projection_class: type[Projection]) -> dict[str, Any]:
    return {"language": settings.search_language} if projection_class is SearchProjection else {}


def projection_engine(settings: Settings, target: PostgresTarget, keys: KeyRing | None = None) -> ProjectionEngine:
    return ProjectionEngine(
        target,
        build_projections(settings),
        settings.projection_batch_size,
        settings.read_model_vacuum_every,
        settings.projection_threads,
        keys,
    )



def build_projections(settings: Settings) -> list[Projection]:
    return [p(**projection_options(settings, p)) for p in PROJECTIONS]
