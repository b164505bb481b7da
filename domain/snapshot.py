"""Snapshots of aggregate state through explicit, typed models (never pickle).

An aggregate class that declares `State = state_of(ItsAttributes)` (every attribute its
events set, with its type) can be snapshotted: `capture` validates `vars(aggregate)` through that
model, `restore` builds a fresh instance from a validated model. A class without one is
simply never snapshotted, and neither is an instance whose attributes the model does not
cover exactly (an attribute added without updating the model must not be lost).
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from functools import cache
from typing import Any, TypeVar, get_type_hints
from uuid import UUID

from pydantic import BaseModel, ConfigDict, create_model

from domain.base import Aggregate

A = TypeVar("A", bound=Aggregate)
BASE_ATTRIBUTES = ("_id", "_version", "_created_on", "_modified_on", "_pending_events")


class AggregateState(BaseModel):
    """Base of a `State` model: every aggregate has an owner."""

    model_config = ConfigDict(extra="forbid")

    owner: str


def state_of(attributes: type) -> type[AggregateState]:
    """The State model of an aggregate whose events set the names `attributes` annotates
    (declared once, on a plain class the aggregate inherits, so that the type checker sees
    them and eventsourcing does not make the aggregate a dataclass)."""
    fields: dict[str, Any] = {name: (hint, ...) for name, hint in get_type_hints(attributes).items()}
    return create_model("State", __base__=AggregateState, __doc__=attributes.__doc__, **fields)


class Unsnapshottable(Exception):
    """The aggregate's attributes do not match its declared State model."""


def state_model(cls: type) -> type[AggregateState] | None:
    model = getattr(cls, "State", None)
    return model if isinstance(model, type) and issubclass(model, AggregateState) else None


@cache
def schema_of(cls: type) -> str:
    """A short fingerprint of the class's State model and `class_version` (raised when what a
    field holds changes shape): a snapshot taken under another one is ignored."""
    model = state_model(cls)
    schema = json.dumps(model.model_json_schema() if model else None, sort_keys=True)
    version = getattr(cls, "class_version", 1)
    versioned = f"\0{version}" if version > 1 else ""  # (so that raising one class's leaves the others' snapshots)
    return hashlib.sha256(f"{cls.__module__}:{cls.__qualname__}\0{schema}{versioned}".encode()).hexdigest()[:16]


def capture(aggregate: Aggregate) -> AggregateState:
    """The aggregate's state as its State model; Unsnapshottable if it has none or the
    attributes differ from the model's fields."""
    model = state_model(type(aggregate))
    if model is None:
        raise Unsnapshottable(f"{type(aggregate).__name__} declares no State model")
    attributes = {k: v for k, v in vars(aggregate).items() if k not in BASE_ATTRIBUTES}
    if attributes.keys() != model.model_fields.keys():
        missing = sorted(model.model_fields.keys() - attributes.keys())
        extra = sorted(attributes.keys() - model.model_fields.keys())
        raise Unsnapshottable(f"{type(aggregate).__name__}.State differs: missing {missing}, not declared {extra}")
    return model.model_validate(attributes)


def restore(
    cls: type[A], state: bytes | dict[str, Any], *, id: UUID, version: int, created_on: datetime, modified_on: datetime
) -> A:
    """A fresh instance of `cls` at `version` with the given state (JSON or a dict, validated
    through its model; pydantic's ValidationError when it does not fit)."""
    model = state_model(cls)
    if model is None:
        raise Unsnapshottable(f"{cls.__name__} declares no State model")
    validated = model.model_validate_json(state) if isinstance(state, bytes) else model.model_validate(state)
    aggregate = object.__new__(cls)
    aggregate._id = id
    aggregate._version = version
    aggregate._created_on = created_on
    aggregate._modified_on = modified_on
    aggregate._pending_events = []
    for name in model.model_fields:
        setattr(aggregate, name, getattr(validated, name))
    return aggregate
