"""The dispatch tables: every request model is served once, each by a handler of its own reply,
and the client and gateways send only what the tables serve."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import typing
from pathlib import Path
from types import ModuleType
from typing import Any

import chronicle_client
import chronicle_contract
import pytest
from chronicle_contract.base import Command, Query, Reply, Request
from mypy import api as mypy

from entrypoints.gateways import rest_routes
from entrypoints.routes import INTERNAL, ROUTES, command_handlers, subject
from services.runtime.dispatch import Decide, Entry, Read, Serve
from services.runtime.replies import Wire

ROOT = Path(__file__).resolve().parents[2]
SERVED = {entry.request for table in ROUTES for entry in table}
ENTRIES: list[Entry] = [entry for table in (*ROUTES, *INTERNAL) for entry in table]


def contract_requests() -> list[type[Request[Any]]]:
    found = []
    for module_info in pkgutil.iter_modules(chronicle_contract.__path__):
        module = importlib.import_module(f"chronicle_contract.{module_info.name}")
        found += [
            value for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Request) and value.__module__ == module.__name__ and value.action
        ]
    return found


def test_every_request_model_with_an_action_is_served_or_decided_internally() -> None:
    routed = {entry.request for entry in ENTRIES}
    assert set(contract_requests()) == routed


def test_each_subject_is_served_once() -> None:
    served = [subject("chronicle", entry.request) for table in ROUTES for entry in table]
    assert len(served) == len(set(served))


@pytest.mark.parametrize("request_type", contract_requests(), ids=lambda t: t.__name__)
def test_a_request_declares_a_reply_model_and_its_kind(request_type: type[Request[Any]]) -> None:
    assert issubclass(request_type.reply, Reply) and request_type.reply is not Reply
    assert issubclass(request_type, Command) != issubclass(request_type, Query)


def test_the_bus_decides_every_command_no_read_or_served_handler_reaches_it() -> None:
    handlers = command_handlers()
    served_elsewhere = {e.request for table in ROUTES for e in table if isinstance(e, Read | Serve)}
    decided_inline = {e.request for table in ROUTES for e in table if isinstance(e, Decide)}
    internal = {e.request for table in INTERNAL for e in table}
    assert set(handlers) == decided_inline | internal
    assert all(issubclass(request_type, Command) for request_type in handlers)
    # A served command (slow work first) reaches the bus only as the internal command it
    # prepares, except erasure, whose own request is what the bus records.
    assert served_elsewhere & set(handlers) <= internal


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: f"{type(e).__name__}-{e.request.__name__}")
def test_a_handler_answers_its_requests_reply_model(entry: Entry) -> None:
    """The type checker binds a handler to its request (test below); this binds its declared
    reply to the one the request names: the model itself (or one that sends more fields
    than the contract promises), or the model's data as the wire carries it."""
    declared = typing.get_type_hints(entry.handler)["return"]
    if typing.get_origin(declared) is Wire:
        [declared] = typing.get_args(declared)
    assert isinstance(declared, type) and issubclass(declared, entry.request.reply)


def test_handing_a_request_another_requests_handler_is_a_type_error(tmp_path: Path) -> None:
    """A capability's table with two handlers swapped, as its module writes it, fails the
    type checker on both lines; the table as written passes."""
    table = (ROOT / "services/conversations/dispatch.py").read_text()
    swapped = table.replace("commands.add_message", "HANDLER_A").replace("commands.delete_conversation", "HANDLER_B")
    swapped = swapped.replace("HANDLER_A", "commands.delete_conversation").replace("HANDLER_B", "commands.add_message")
    assert swapped != table
    (tmp_path / "as_written.py").write_text(table)
    (tmp_path / "swapped.py").write_text(swapped)
    output, _, status = mypy.run(
        ["--config-file", str(ROOT / "pyproject.toml"), str(tmp_path / "as_written.py"), str(tmp_path / "swapped.py")]
    )
    errors = {  # (file, line) of each error
        (Path(where).name, int(line)) for where, line, *_ in (
            error.split(":", 2) for error in output.splitlines() if ": error:" in error
        )
    }
    swapped_lines = {
        ("swapped.py", number) for number, line in enumerate(swapped.splitlines(), start=1)
        if "AddMessage, commands.delete_conversation" in line or "DeleteConversation, commands.add_message" in line
    }
    assert status == 1 and len(swapped_lines) == 2
    assert errors == swapped_lines, output


def requests_named(module: ModuleType) -> set[type[Request[Any]]]:
    """The request models a module's code names (the client and the gateways name the model
    they send; subjects and replies come from it)."""
    tree = ast.parse(Path(module.__file__ or "").read_text())
    names = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    found = (getattr(module, name, None) for name in names)
    return {value for value in found if isinstance(value, type) and issubclass(value, Request) and value.action}


def client_requests() -> set[type[Request[Any]]]:
    modules = pkgutil.iter_modules(chronicle_client.__path__)
    return set().union(*(requests_named(importlib.import_module(f"chronicle_client.{m.name}")) for m in modules))


def test_the_client_sends_only_served_requests() -> None:
    assert client_requests() <= SERVED


def test_the_rest_routes_and_mcp_tools_send_only_served_requests() -> None:
    assert {route.request for route in rest_routes.ROUTES if route.run is None} <= SERVED
    assert requests_named(importlib.import_module("entrypoints.gateways.mcp")) <= SERVED
    # The seeds' routes and tools are made of requests the service serves (their own models
    # name no subject: they are never sent).
    for seed in ("jobs", "optimizations", "hitl"):
        assert requests_named(importlib.import_module(f"entrypoints.gateways.seeds.{seed}")) <= SERVED
    assert all(not route.request.action for route in rest_routes.ROUTES if route.run is not None)


def test_every_served_request_has_a_caller_in_the_client_or_a_gateway() -> None:
    from chronicle_contract.users import EraseUser

    gateways = {route.request for route in rest_routes.ROUTES} | requests_named(
        importlib.import_module("entrypoints.gateways.mcp")
    )
    # Erasure is an operator's (an admin token, or `chronicle erase-user`), not a client's.
    assert SERVED - client_requests() - gateways == {EraseUser}


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
