"""Unit tests run without Postgres or NATS: a test here that asks for a server fails."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def servers() -> None:
    pytest.fail("unit tests use in-memory fakes; a test that needs a server belongs in tests/integration")
