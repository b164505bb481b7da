"""The result: one row per metric with its value and aim, printed as a table and saved as JSON."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

RESULTS_DIR = Path(__file__).parent / "results"


def timed(runs: int, call: Callable[[], Any]) -> list[float]:
    """How long each of `runs` calls took, in ms."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def timed_async(runs: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    """How long each of `runs` awaited calls took, in ms."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0-100), interpolating between the two nearest ranks."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Aim:
    """A bound the value should stay below (`below=True`) or above."""

    bound: float
    below: bool

    def met_by(self, value: float) -> bool:
        return value < self.bound if self.below else value > self.bound

    def describe(self, unit: str) -> str:
        return f"{'<' if self.below else '>'} {self.bound:,.0f} {unit}".rstrip()


def under(bound: float) -> Aim:
    return Aim(bound, below=True)


def over(bound: float) -> Aim:
    return Aim(bound, below=False)


@dataclass(frozen=True)
class Row:
    metric: str
    value: float  # NaN when there was nothing to measure
    unit: str = ""
    aim: Aim | None = None
    note: str = ""

    @property
    def met(self) -> bool | None:
        return None if self.aim is None or math.isnan(self.value) else self.aim.met_by(self.value)

    def value_text(self) -> str:
        if math.isnan(self.value):
            return "n/a"
        whole = self.value.is_integer() and not self.unit.endswith("ms")
        number = f"{self.value:,.0f}" if whole or abs(self.value) >= 100 else f"{self.value:,.1f}"
        return f"{number} {self.unit}".rstrip() + (f" ({self.note})" if self.note else "")

    def aim_text(self) -> str:
        if self.aim is None:
            return ""
        return f"{self.aim.describe(self.unit)}  {'met' if self.met else 'MISSED'}"


@dataclass
class Report:
    config: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, metric: str, value: float, unit: str = "", aim: Aim | None = None, note: str = "") -> None:
        self.rows.append(Row(metric, float(value), unit, aim, note))

    def add_percentiles(
        self, name: str, latencies_ms: list[float], *, aim_p95: Aim | None = None, aim_p99: Aim | None = None,
        note: str = "",
    ) -> None:
        """p50, p95 and p99 rows for one latency distribution (ms)."""
        aims = {95: aim_p95, 99: aim_p99}
        for p in (50, 95, 99):
            self.add(f"{name} p{p}", percentile(latencies_ms, p), "ms", aims.get(p), note if p == 50 else "")

    def table(self) -> str:
        header = ("metric", "value", "aim")
        cells = [header] + [(r.metric, r.value_text(), r.aim_text()) for r in self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(3)]
        lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in cells]
        lines.insert(1, "-+-".join("-" * w for w in widths))
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "metrics": [
                {**asdict(r), "value": None if math.isnan(r.value) else r.value, "aim": r.aim_text() or None,
                 "met": r.met}
                for r in self.rows
            ],
            "details": self.details,
        }

    def save(self, directory: Path = RESULTS_DIR) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
        path.write_bytes(orjson.dumps(self.as_json(), option=orjson.OPT_INDENT_2))
        return path


def show(report: Report, path: Path) -> None:
    """A suite's result on the terminal: its table, and where its JSON was saved."""
    print(report.table())
    print(f"\nsaved {path}")
