"""Real servers for tests: the machine's Postgres and NATS when reachable, else embedded ones."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.scratch import local_or_embedded, scratch_database


@dataclass
class TestServers:
    __test__ = False  # a fixture value, not a test class

    admin_url: str  # a database we may CREATE DATABASE from
    nats_url: str

    def fresh_database(self) -> contextlib.AbstractContextManager[str]:
        """A new, empty database for one test or session; dropped afterwards."""
        return scratch_database(self.admin_url, "chronicle_test")


@contextlib.contextmanager
def test_servers(scratch: Path) -> Iterator[TestServers]:
    # CHRONICLE_TEST_EMBEDDED=1 runs the suite as a machine without local servers would.
    prefer_local = os.environ.get("CHRONICLE_TEST_EMBEDDED") != "1"
    with local_or_embedded(scratch, prefer_local=prefer_local) as (admin_url, nats_url):
        yield TestServers(admin_url, nats_url)
