"""The read models' Postgres views, by the projection each serves."""

from __future__ import annotations

from typing import Any

from adapters.read_side.view import PostgresView, ReadModel
from adapters.read_side.views.artifacts import PostgresArtifactsView
from adapters.read_side.views.audit import PostgresAuditView
from adapters.read_side.views.history import PostgresHistoryView
from adapters.read_side.views.hitl import PostgresHitlView
from adapters.read_side.views.jobs import PostgresJobsView
from adapters.read_side.views.lineage import PostgresLineageView
from adapters.read_side.views.optimizations import PostgresOptimizationsView
from adapters.read_side.views.search import PostgresSearchView
from adapters.read_side.views.semantic import PostgresSemanticView
from adapters.read_side.views.stats import PostgresStatsView
from projections.artifacts import ArtifactsProjection
from projections.audit import AuditProjection
from projections.history import HistoryProjection
from projections.hitl import HitlProjection
from projections.jobs import JobsProjection
from projections.lineage import LineageProjection
from projections.optimizations import OptimizationsProjection
from projections.search import SearchProjection
from projections.semantic import SemanticProjection
from projections.stats import StatsProjection
from projections.view import Projection

POSTGRES_VIEWS: dict[type[Projection[Any]], type[PostgresView]] = {
    HistoryProjection: PostgresHistoryView,
    StatsProjection: PostgresStatsView,
    SearchProjection: PostgresSearchView,
    SemanticProjection: PostgresSemanticView,
    HitlProjection: PostgresHitlView,
    OptimizationsProjection: PostgresOptimizationsView,
    LineageProjection: PostgresLineageView,
    AuditProjection: PostgresAuditView,
    ArtifactsProjection: PostgresArtifactsView,
    JobsProjection: PostgresJobsView,
}


def read_model_of(projection: type[Projection[Any]], **options: Any) -> ReadModel:
    """The projection over its Postgres view, made with these options."""
    return ReadModel(projection, POSTGRES_VIEWS[projection], options)
