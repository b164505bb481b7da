"""The read models Chronicle keeps (each projection over its Postgres view), and the projection engine that keeps them, as settings configure them."""

from __future__ import annotations

from typing import Any

from adapters.embedding.hashed import HashedNgramEmbedder
from adapters.embedding.openai import OpenAIEmbeddings
from adapters.read_side.engine import ProjectionEngine
from adapters.read_side.view import ReadModel
from adapters.read_side.views import read_model_of
from adapters.read_side.views.semantic import semantic_support
from adapters.store.keys import KeyRing
from adapters.store.postgres import PostgresTarget
from entrypoints.rebuild_helper import rebuild_helper
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


NO_EMBEDDER = "no embedder is configured (CHRONICLE_EMBEDDER=none); search ranks by full text"


class ReadModels:
    """The read models this deployment keeps, and why semantic search is off when it is.

    Every read model; the semantic one only if an embedder is set and the server has
    pgvector. The server is asked once per process, as the database starts (`choose`);
    every process of a deployment asks the same server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.classes: list[type[Projection[Any]]] = list(PROJECTIONS)
        self.semantic_off: str | None = NO_EMBEDDER if settings.embedder == "none" else "the server was not asked yet"
        self.projections: list[Projection[Any]] = [r.build() for r in postgres_read_models(settings, self.classes)]

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.classes]

    @property
    def candidates(self) -> list[str]:
        """The names of every read model this deployment may keep, before the server is asked."""
        return self.names + ([] if self.settings.embedder == "none" else [p.name for p in OPTIONAL])

    def choose(self, target: PostgresTarget) -> None:
        if self.settings.embedder == "none":
            return
        with target.connect(autocommit=True) as conn:
            self.semantic_off = semantic_support(conn)
        if self.semantic_off is None and SemanticProjection not in self.classes:
            self.classes.append(SemanticProjection)
            self.projections.append(postgres_read_model(self.settings, SemanticProjection).build())


class InProcessEngine:
    """The projection engine in this process, over the read models the server keeps: its
    threads are made on start, once the database has been asked which those are."""

    def __init__(self, read_models: ReadModels, target: PostgresTarget, keys: KeyRing | None) -> None:
        self.read_models = read_models
        self.target = target
        self.keys = keys
        self.engine: ProjectionEngine | None = None

    def start(self) -> None:
        settings = self.read_models.settings
        self.engine = ProjectionEngine(
            self.target,
            postgres_read_models(settings, self.read_models.classes),
            settings.projection_batch_size,
            settings.read_model_vacuum_every,
            settings.projection_threads,
            self.keys,
            rebuild_helper(settings, self.target),
        )
        self.engine.start()

    def wait_prepared(self, timeout: float) -> bool:
        return self.engine is not None and self.engine.wait_prepared(timeout)

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.stop()


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


def postgres_read_model(settings: Settings, projection_class: type[Projection[Any]]) -> ReadModel:
    return read_model_of(projection_class, **projection_options(settings, projection_class))


def postgres_read_models(settings: Settings, classes: list[type[Projection[Any]]]) -> list[ReadModel]:
    return [postgres_read_model(settings, p) for p in classes]
