"""The dispatch tables: every request model is served once, the subjects are the contract's."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import chronicle_contract
import pytest
from chronicle_contract.base import Command, Query, Reply, Request

from entrypoints.routes import INTERNAL, ROUTES, command_handlers, subject
from services.runtime.dispatch import Read, Serve

# The subjects served before the tables were derived from the request models
# (`chronicle.cmd.*` and `chronicle.query.*`): a client written against them still works.
# Since then: cmd.hitl.take (an orchestrator takes the answer from the service) and
# cmd.artifact.upload_part (large previews in parts, through the service), cmd.artifact.draft
# (generate without storing: seed 000's generate_layout with persist=false).
PUBLISHED_SUBJECTS = {
    "cmd.artifact.cache_preview", "cmd.artifact.draft", "cmd.artifact.generate", "cmd.artifact.refine", "cmd.artifact.store",
    "cmd.artifact.tag", "cmd.artifact.upload_part", "cmd.artifact.variations", "cmd.conversation.add_message", "cmd.conversation.delete",
    "cmd.conversation.start", "cmd.conversation.update", "cmd.hitl.pause", "cmd.hitl.resume",
    "cmd.hitl.take", "cmd.job.request",
    "cmd.optimization.start", "cmd.optimization.stop", "cmd.round.end", "cmd.round.start", "cmd.session.close",
    "cmd.session.create", "cmd.session.update", "cmd.trial.record", "cmd.trial.record_many", "cmd.trial.invalidate", "cmd.trial.restore", "cmd.user.erase",
    "query.artifacts.by_example", "query.artifacts.compare", "query.artifacts.get", "query.artifacts.lineage",
    "query.artifacts.list", "query.artifacts.preview", "query.artifacts.rag_influence", "query.artifacts.search",
    "query.audit.digests", "query.audit.stream", "query.audit.timeline", "query.candidates.lineage",
    "query.conversations.export", "query.conversations.get", "query.conversations.list",
    "query.conversations.search", "query.conversations.stats", "query.hitl.get", "query.hitl.list",
    "query.jobs.get", "query.jobs.list", "query.optimizations.compare", "query.optimizations.get",
    "query.optimizations.history", "query.optimizations.list", "query.optimizations.pareto",
    "query.sessions.get", "query.sessions.list", "query.variations.get",
}


def contract_requests() -> list[type[Request[Any]]]:
    found = []
    for module_info in pkgutil.iter_modules(chronicle_contract.__path__):
        module = importlib.import_module(f"chronicle_contract.{module_info.name}")
        found += [
            value for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Request) and value.__module__ == module.__name__ and value.action
        ]
    return found


def test_the_served_subjects_are_the_published_ones() -> None:
    served = [subject("chronicle", request_type).removeprefix("chronicle.") for table in ROUTES for request_type in table]
    assert len(served) == len(set(served))
    assert set(served) == PUBLISHED_SUBJECTS


def test_every_request_model_with_an_action_is_served_or_decided_internally() -> None:
    routed = {request_type for table in ROUTES for request_type in table}
    routed |= {request_type for table in INTERNAL for request_type in table}
    assert set(contract_requests()) == routed


@pytest.mark.parametrize("request_type", contract_requests(), ids=lambda t: t.__name__)
def test_a_request_declares_a_reply_model_and_its_kind(request_type: type[Request[Any]]) -> None:
    assert issubclass(request_type.reply, Reply) and request_type.reply is not Reply
    assert issubclass(request_type, Command) != issubclass(request_type, Query)


def test_the_bus_decides_every_command_no_read_or_served_handler_reaches_it() -> None:
    handlers = command_handlers()
    served_elsewhere = {t for table in ROUTES for t, h in table.items() if isinstance(h, Read | Serve)}
    decided_inline = {t for table in ROUTES for t, h in table.items() if not isinstance(h, Read | Serve)}
    internal = {t for table in INTERNAL for t in table}
    assert set(handlers) == decided_inline | internal
    # A served command (slow work first) reaches the bus only as the internal command it
    # prepares, except erasure, whose own request is what the bus records.
    assert served_elsewhere & set(handlers) <= internal
    assert all(callable(handler) for handler in handlers.values())


def test_a_reply_that_breaks_its_contract_is_caught_before_it_is_sent() -> None:
    from uuid import uuid4

    from chronicle_contract.errors import ChronicleError
    from chronicle_contract.sessions import CreateSession

    from adapters.messaging.nats_service import Route, check_reply

    async def unused(user: str, request: Any, key: str | None) -> dict[str, Any]:
        return {}

    route = Route("chronicle.cmd.session.create", CreateSession, CreateSession.reply, unused)
    check_reply(route, {"session_id": str(uuid4()), "position": 7})  # what the contract promises
    with pytest.raises(ChronicleError) as caught:
        check_reply(route, {"position": 7})  # the session id went missing
    assert caught.value.code == "internal"
