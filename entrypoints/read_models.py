"""The read models Chronicle keeps (each projection over its Postgres view), and the projection engine that keeps them, as settings configure them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.embedding.hashed import HashedNgramEmbedder
from adapters.embedding.openai import OpenAIEmbeddings
from adapters.read_side.engine import ProjectionEngine
from adapters.read_side.view import ReadModel
from adapters.read_side.views import read_model_of
from adapters.read_side.views.semantic import semantic_support
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from entrypoints.settings import Settings
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
from services.ports.embedder import Embedder

PROJECTIONS: list[type[Projection[Any]]] = [
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


# Kept where the server can hold vectors and an embedder is configured (see `kept`).
OPTIONAL: list[type[Projection[Any]]] = [SemanticProjection]


@dataclass(frozen=True)
class ReadModels:
    """The read models this deployment keeps, and why semantic search is off when it is."""

    classes: list[type[Projection[Any]]]
    semantic_off: str | None

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.classes]


def kept(settings: Settings, target: PostgresTarget) -> ReadModels:
    """Every read model, the semantic one only if an embedder is set and the server has
    pgvector (asked once per process; every process of a deployment asks the same server)."""
    if settings.embedder == "none":
        return ReadModels(PROJECTIONS, "no embedder is configured (CHRONICLE_EMBEDDER=none); search ranks by full text")
    with target.connect(autocommit=True) as conn:
        why_not = semantic_support(conn)
    return ReadModels(PROJECTIONS + ([SemanticProjection] if why_not is None else []), why_not)


def embedder(settings: Settings, timeout: float = 30.0) -> Embedder:
    """The configured embedder; `timeout`: how long a call to an endpoint may take."""
    if settings.embedder == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else ""
        return OpenAIEmbeddings(
            settings.openai_url, settings.embedding_model, key, settings.embedding_dimensions or 1536, timeout=timeout
        )
    return HashedNgramEmbedder(settings.embedding_dimensions or 256)


def projection_options(settings: Settings, projection_class: type[Projection[Any]]) -> dict[str, Any]:
    if projection_class is SearchProjection:
        return {"language": settings.search_language}
    if projection_class is SemanticProjection:
        return {"embedder": embedder(settings)}
    return {}


def projection_engine(settings: Settings, target: PostgresTarget, keys: KeyRing | None = None) -> ProjectionEngine:
    return ProjectionEngine(
        target,
        postgres_read_models(settings, kept(settings, target).classes),
        settings.projection_batch_size,
        settings.read_model_vacuum_every,
        settings.projection_threads,
        keys,
    )


def postgres_read_model(settings: Settings, projection_class: type[Projection[Any]]) -> ReadModel:
    return read_model_of(projection_class, **projection_options(settings, projection_class))


def postgres_read_models(settings: Settings, classes: list[type[Projection[Any]]]) -> list[ReadModel]:
    return [postgres_read_model(settings, p) for p in classes]
