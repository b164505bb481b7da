"""Request ids: a client's own, or one the service makes, in every log line written while
handling the request and in the reply (#20: logs carry a request id a client can pass)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import orjson
import pytest
from chronicle_client import ChronicleError
from chronicle_contract import request_ids

from entrypoints.bootstrap import Chronicle
from entrypoints.logs import JsonFormatter
from tests.conftest import ClientFactory


class Lines(logging.Handler):
    """The service's log lines as the JSON formatter writes them, at the moment they are written."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(orjson.loads(self.format(record)))


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler, logger = Lines(), logging.getLogger("adapters.messaging.nats_service")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


async def test_a_clients_request_id_is_in_the_services_log_lines_and_its_error(
    chronicle: Chronicle, connect: ClientFactory, lines: Lines
) -> None:
    client = await connect()
    mine = f"trace-{uuid.uuid4().hex[:8]}"
    token = request_ids.current.set(mine)  # (as a gateway does for its own request)
    try:
        with pytest.raises(ChronicleError) as missing:
            await client.artifacts.get(uuid.uuid4())
        await client.sessions.create("logged")
    finally:
        request_ids.current.reset(token)
    assert missing.value.code == "not_found" and missing.value.request_id == mine
    logged = [line for line in lines.lines if line.get("request_id") == mine]
    assert {(line["msg"], line["code"]) for line in logged} == {("request", "not_found"), ("request", "ok")}


async def test_without_a_usable_one_the_service_makes_one_and_says_it(
    chronicle: Chronicle, connect: ClientFactory, lines: Lines
) -> None:
    client = await connect()
    prefix = chronicle.settings.subject_prefix
    for given in (None, "has spaces in it", "x" * 65, "ünïcode"):
        headers = {"Authorization": f"Bearer {client.token}"} | ({request_ids.HEADER: given} if given else {})
        reply = await client.nc.request(f"{prefix}.query.sessions.list", b"{}", headers=headers, timeout=5)
        made = (reply.headers or {})[request_ids.HEADER]
        assert made != given and request_ids.USABLE.fullmatch(made)
        assert any(line.get("request_id") == made for line in lines.lines)
