"""Every number a request takes is bounded above before it costs anything: a 27-digit
`afterRound` reached Postgres as a numeric its integer column could not take, and the
gateway answered 500 where the caller should have had `invalid` naming the field."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from typing import Any

import chronicle_contract
import pytest
from chronicle_contract.base import Request
from chronicle_contract.optimizations import OptimizationHistory
from pydantic import ValidationError

from tests.unit.json_schemas import integers_without_maximum

for module in pkgutil.iter_modules(chronicle_contract.__path__):
    importlib.import_module(f"chronicle_contract.{module.name}")


def requests(cls: type[Request[Any]] = Request) -> Iterator[type[Request[Any]]]:
    for sub in cls.__subclasses__():
        if "[" not in sub.__name__:  # (pydantic's parametrised generics)
            yield sub
        yield from requests(sub)


ACTIONS = sorted({cls for cls in requests() if cls.action}, key=lambda cls: cls.action)


def test_there_are_requests_to_check() -> None:
    assert len(ACTIONS) > 60


@pytest.mark.parametrize("cls", ACTIONS, ids=[cls.action for cls in ACTIONS])
def test_every_integer_a_request_takes_has_an_upper_bound(cls: type[Request[Any]]) -> None:
    schema = cls.model_json_schema()
    assert integers_without_maximum(schema, schema.get("$defs", {})) == []


def test_a_round_index_past_a_postgres_integer_is_invalid_naming_the_field() -> None:
    with pytest.raises(ValidationError) as error:
        OptimizationHistory.model_validate(
            {"optimization_id": "43d470a3-0ef0-4fc3-acce-40256c7c0f38", "after_round": 210264876305630025503211520}
        )
    assert [e["loc"] for e in error.value.errors()] == [("after_round",)]
