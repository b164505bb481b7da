"""Real servers for tests, chosen explicitly: embedded ones unless variables name others.

CHRONICLE_TEST_DATABASE_URL (a database on a server the tests may CREATE DATABASE from) and
CHRONICLE_TEST_NATS_URL name the servers to use; each one unset is started embedded, so the
README's test command works on a bare machine, and a machine's own servers are used only
when named (.ci/run names them). The choice is printed at the start of the run.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from adapters.store.postgres import PostgresTarget
from bench.scratch import local_or_embedded, scratch_database
from entrypoints.servers import LOCK, running_service

DATABASE_VARIABLE = "CHRONICLE_TEST_DATABASE_URL"
NATS_VARIABLE = "CHRONICLE_TEST_NATS_URL"
REPOSITORY = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ServerChoice:
    """The servers a test run uses: the URLs named, None for an embedded one."""

    database_url: str | None
    nats_url: str | None

    @classmethod
    def of(cls, environ: Mapping[str, str]) -> ServerChoice:
        return cls(environ.get(DATABASE_VARIABLE) or None, environ.get(NATS_VARIABLE) or None)

    def describe(self) -> str:
        postgres = f"{PostgresTarget(self.database_url).describe()} ({DATABASE_VARIABLE})" if self.database_url \
            else f"embedded (set {DATABASE_VARIABLE} for another)"
        nats = f"{self.nats_url} ({NATS_VARIABLE})" if self.nats_url else f"embedded (set {NATS_VARIABLE} for another)"
        return f"test servers: Postgres {postgres}; NATS {nats}"


@dataclass
class TestServers:
    __test__ = False  # a fixture value, not a test class

    admin_url: str  # a database we may CREATE DATABASE from
    nats_url: str

    def fresh_database(self) -> contextlib.AbstractContextManager[str]:
        """A new, empty database for one test or session; dropped afterwards."""
        return scratch_database(self.admin_url, "chronicle_test")


@contextlib.contextmanager
def test_servers(scratch: Path, choice: ServerChoice | None = None) -> Iterator[TestServers]:
    choice = choice or ServerChoice.of(os.environ)
    with local_or_embedded(scratch, database_url=choice.database_url, nats_url=choice.nats_url,
                           prefer_local=False) as (admin_url, nats_url):
        yield TestServers(admin_url, nats_url)


# What an embedded service running on a data dir writes by itself (a developer's `./dev serve`).
SERVED_FILES = ("postgres", "nats", "nats.log")


@dataclass(frozen=True)
class DataDirWatch:
    """The files under a data dir, to show that a test run wrote nothing there (the
    repository's own `.chronicle` belongs to the developer's `./dev serve`)."""

    data_dir: Path
    files: dict[str, tuple[int, int]]  # relative path -> (modification time, size)
    served: bool  # a service ran there when the watch began: its servers' own files change

    @classmethod
    def begin(cls, data_dir: Path = REPOSITORY / ".chronicle") -> DataDirWatch:
        return cls(data_dir, files_under(data_dir), running_service(data_dir) is not None)

    def changed(self) -> list[str]:
        """The paths created, changed or removed since the watch began."""
        now = files_under(self.data_dir)
        changed = sorted(path for path in self.files.keys() | now.keys() if self.files.get(path) != now.get(path))
        if self.served:
            changed = [path for path in changed if path.split("/")[0] not in SERVED_FILES and path != LOCK]
        return changed


def files_under(root: Path) -> dict[str, tuple[int, int]]:
    """Every file (its time and size) and directory (its being there) under root."""
    found = {".": (0, 0)} if root.is_dir() else {}
    for directory, subdirectories, names in os.walk(root):
        found.update({str(Path(directory, name).relative_to(root)): (0, 0) for name in subdirectories})
        for name in names:
            path = Path(directory, name)
            with contextlib.suppress(OSError):  # (a server's file may go as we look)
                stat = path.lstat()
                found[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size)
    return found
