"""Who used the CPU during a phase: the service, its Postgres backends, the bench itself (Linux /proc).

On a 2-core machine the load generator, the service and Postgres share the cores, so a
throughput figure means little without this split. Elsewhere the meter reports nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...); [] if the
    process is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return []
    return stat.rpartition(")")[2].split()  # the command name may hold spaces; skip past it


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), 0 if it is gone."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def machine_busy_seconds() -> float:
    """CPU seconds all cores spent not idle since boot (from the first line of /proc/stat)."""
    try:
        ticks = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def postgres_backends(database: str) -> list[int]:
    """Backends serving `database`: their process title names it ("postgres: ... user db host ...")."""
    found = []
    for entry in PROC.glob("[0-9]*"):
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if title.startswith("postgres:") and f" {database} " in title:
            found.append(int(entry.name))
    return found


def processes_named(name: str) -> list[int]:
    """Processes whose command name is `name` (nats-server, say)."""
    found = []
    for entry in PROC.glob("[0-9]*"):
        try:
            if (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    """The processes `pid` started (the service's projection process, say)."""
    return [int(entry.name) for entry in PROC.glob("[0-9]*") if stat_fields(int(entry.name))[1:2] == [str(pid)]]


def milliseconds_each(cores: dict[str, float], seconds: float, count: int) -> dict[str, float]:
    """CpuMeter.stop()'s cores over a phase of `seconds` as CPU milliseconds per unit of work."""
    return {name: used * seconds * 1000 / count for name, used in cores.items()}


@dataclass
class CpuMeter:
    """Cores used per group between start() and stop(): CPU seconds / wall seconds."""

    service_pid: int
    database: str
    _before: dict[str, float] = field(default_factory=dict)
    _backends: dict[int, float] = field(default_factory=dict)
    _children: dict[int, float] = field(default_factory=dict)
    _started: float = 0.0

    @staticmethod
    def available() -> bool:
        return (PROC / "self" / "stat").exists()

    def _sample(self) -> tuple[dict[str, float], dict[int, float], dict[int, float]]:
        backends = {pid: process_cpu_seconds(pid) for pid in postgres_backends(self.database)}
        children = {pid: process_cpu_seconds(pid) for pid in children_of(self.service_pid)}
        groups = {
            "service": process_cpu_seconds(self.service_pid),
            "bench": process_cpu_seconds(os.getpid()),
            "nats": sum(process_cpu_seconds(pid) for pid in processes_named("nats-server")),
            "machine": machine_busy_seconds(),
        }
        return groups, backends, children

    def start(self) -> None:
        self._before, self._backends, self._children = self._sample()
        self._started = time.perf_counter()

    def stop(self) -> dict[str, float]:
        """Cores used by 'service', its child processes ('projections': the projection process
        and the event feed's), 'postgres' (this
        database's backends), 'bench', 'nats' (every nats-server here) and the whole 'machine'."""
        if not self.available():
            return {}
        seconds = time.perf_counter() - self._started
        after, backends, children = self._sample()
        used = {name: after[name] - self._before[name] for name in after}
        # Processes that started during the phase count from zero.
        used["postgres"] = sum(cpu - self._backends.get(pid, 0.0) for pid, cpu in backends.items())
        used["projections"] = sum(cpu - self._children.get(pid, 0.0) for pid, cpu in children.items())
        return {name: round(value / seconds, 2) for name, value in used.items()}
