"""Ready means ready: the moment a start returns (when `chronicle serve` logs `ready`), every
endpoint answers normally on a fresh database, the read models it reads already built."""

from __future__ import annotations

import types
import typing
import uuid
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import nats
import orjson
import pytest
from chronicle_contract.conversations import StartConversation
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from adapters.auth import TokenAuthority
from entrypoints.bootstrap import bootstrap
from entrypoints.routes import ROUTES, subject
from tests.conftest import JWT_SECRET, make_settings
from tests.servers import TestServers


def sample(annotation: Any) -> Any:
    """A plausible value of a field's type: enough to get past validation to the work."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return sample(args[0])
    if origin in (typing.Union, types.UnionType):
        return sample(next(a for a in args if a is not type(None)))
    if origin is Literal:
        return args[0]
    if origin in (list, tuple):
        return [] if origin is list else [sample(a) for a in args]
    if origin is dict or annotation is dict:
        return {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return payload(annotation.model_fields)
    return {UUID: str(uuid.uuid4()), str: "hello", int: 1, float: 0.5, bool: True}.get(annotation, "hello")


def payload(fields: dict[str, FieldInfo]) -> dict[str, Any]:
    return {name: sample(info.annotation) for name, info in fields.items() if info.is_required()}


FULL = {  # requests whose samples would stop at validation: given whole, so they reach the work
    "conversation.add_message": {"role": "user", "content": "hello"},
    "job.request": {"content": "Photosynthesis turns light into sugar.", "artifact_type": "summary"},
    "artifact.generate": {"query": "a login form"},
    "conversations.search": {"q": "hello"},
    "artifacts.search": {"q": "hello"},
}


@pytest.mark.timeout(120)
async def test_every_endpoint_answers_at_the_instant_a_start_returns(servers: TestServers, tmp_path: Path) -> None:


    with servers.fresh_database() as url:
        settings = make_settings(url, servers.nats_url, tmp_path)
        chronicle = await bootstrap(settings)
        nc = await nats.connect(chronicle.nats_url)
        try:
            token = TokenAuthority(secret=JWT_SECRET).issue(f"first-{uuid.uuid4().hex[:8]}")
            answers = {}
            for table in ROUTES:  # every kind of request, straight away
                for request_type in (entry.request for entry in table):
                    body = {**payload(request_type.model_fields), **FULL.get(request_type.action, {})}
                    if request_type.action == "conversation.add_message":
                        started = orjson.loads((await nc.request(
                            subject(settings.subject_prefix, StartConversation),
                            b"{}", headers={"Authorization": f"Bearer {token}"}, timeout=10)).data)
                        body["conversation_id"] = started["data"]["conversation_id"]
                    reply = await nc.request(subject(settings.subject_prefix, request_type), orjson.dumps(body),
                                             headers={"Authorization": f"Bearer {token}"}, timeout=10)
                    answers[request_type.action] = orjson.loads(reply.data)
        finally:
            await nc.close()
            await chronicle.stop()
    failed = {action: a["error"] for action, a in answers.items()
              if not a["ok"] and a["error"]["code"] in ("unavailable", "internal")}
    assert failed == {}
    assert len(answers) == sum(len(t) for t in ROUTES)
    worked = {action for action, a in answers.items() if a["ok"]}
    assert {"conversation.add_message", "job.request", "conversations.search", "conversations.list",
            "artifacts.search", "artifact.generate", "hitl.list", "optimizations.list"} <= worked


async def test_a_start_that_outwaits_its_timeout_names_the_read_models_still_built(
    servers: TestServers, tmp_path: Path
) -> None:
    with servers.fresh_database() as url:
        chronicle = await bootstrap(make_settings(url, servers.nats_url, tmp_path, ready_timeout=0.001))
        try:
            assert chronicle.rebuilding and set(chronicle.rebuilding) <= {p.name for p in chronicle.projections}
        finally:
            await chronicle.stop()
