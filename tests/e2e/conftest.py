"""The REST gateway the end-to-end modules share: one per module, on the session's service."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.embedded import free_port
from entrypoints.bootstrap import Chronicle
from entrypoints.gateways.clients import UserClients
from entrypoints.gateways.http_server import HttpServer
from entrypoints.gateways.rest import build_app


async def serve_rest(nats_url: str, prefix: str) -> HttpServer:
    return await HttpServer(build_app(UserClients(nats_url, prefix)), "127.0.0.1", free_port()).start()


@pytest.fixture(scope="module")
async def gateway(chronicle: Chronicle) -> AsyncIterator[HttpServer]:
    server = await serve_rest(chronicle.nats_url, chronicle.settings.subject_prefix)
    yield server
    await server.stop()
