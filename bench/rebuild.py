"""Full rebuild of every read model from the first event, in process, as `chronicle projections rebuild`."""

from __future__ import annotations

import time
from dataclasses import dataclass

from adapters.read_side.rebuild import rebuild, rebuild_all
from adapters.store.postgres import PostgresTarget
from entrypoints.read_models import PROJECTIONS, postgres_read_model, postgres_read_models
from entrypoints.settings import Settings


@dataclass(frozen=True)
class Rebuilt:
    name: str
    log_events: int  # positions read through: the whole log
    applied: int  # events of the types this read model handles
    seconds: float

    @property
    def log_events_per_second(self) -> float:
        return self.log_events / self.seconds

    @property
    def applied_per_second(self) -> float:
        return self.applied / self.seconds


def rebuild_side_by_side(target: PostgresTarget, settings: Settings) -> float:
    """Seconds to rebuild every read model at once, as `chronicle projections rebuild all` does."""
    started = time.perf_counter()
    rebuild_all(
        target,
        postgres_read_models(settings, PROJECTIONS),
        batch_size=settings.projection_batch_size,
    )
    return time.perf_counter() - started


def rebuild_each(target: PostgresTarget, settings: Settings, log_events: int) -> list[Rebuilt]:
    """Rebuild each read model in turn (nothing else running), timing each."""
    results = []
    for projection_class in PROJECTIONS:
        started = time.perf_counter()
        applied = rebuild(
            target,
            postgres_read_model(settings, projection_class),
            batch_size=settings.projection_batch_size,
        )
        results.append(Rebuilt(projection_class.name, log_events, applied, time.perf_counter() - started))
    return results
