"""The CPU budget's sorting of py-spy stacks into the parts of the service."""

from __future__ import annotations

import pytest

from bench.budget import OTHER, component_of, shares

HANDLE = "_handle (adapters/messaging/nats_service.py:200)"
COMMIT = "_commit (services/runtime/command_bus.py:250)"


@pytest.mark.parametrize(("stack", "component"), [
    (f"{HANDLE};parse (adapters/messaging/nats_service.py:58);model_validate_json (pydantic/main.py:1)",
     "decode and validation (pydantic)"),
    (f"{COMMIT};_decide (services/runtime/command_bus.py:409);add_message (domain/conversation.py:80)",
     "deciding (loading the aggregate, domain method)"),
    (f"{COMMIT};record (adapters/store/event_store.py:117);execute (psycopg/cursor.py:113)", "commit (psycopg, SQL)"),
    (f"{COMMIT};to_stored_event (adapters/store/mapper.py:90);encrypt (cryptography/aead.py:1)",
     "sealing and mapping events (cipher, mapper, keys)"),
    ("run (asyncio/base_events.py:1);_read_loop (nats/aio/client.py:2000)", "NATS client (nats-py)"),
    ("run (threading.py:1);wait (threading.py:320)", OTHER),
])
def test_a_stack_is_charged_to_the_first_part_any_of_its_frames_belongs_to(stack: str, component: str) -> None:
    assert component_of(stack) == component


def test_shares_weigh_each_stack_by_its_samples() -> None:
    raw = (
        f"{HANDLE};user_of (adapters/auth.py:40) 3\n"
        f"{COMMIT};record (adapters/store/event_store.py:117) 1\n"
        "a line that is no stack\n"
    )
    assert shares(raw) == {"commit (psycopg, SQL)": 0.25, "auth (token)": 0.75}
    assert shares("") == {}
