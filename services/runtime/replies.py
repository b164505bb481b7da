"""A handler's reply on its way to the wire: its model, or data already shaped as the wire carries it.

Handlers return their request's reply model. Two kinds of reply are already what the wire
carries and are not made into a model again: what the command bus answered (the reply as
its idempotency record keeps it, with the bus's `position`), and a query's rows or pages
built in SQL or as dicts for speed (a model per row would cost more than the query). Those
travel as `Wire[Reply]`, a dict typed by the model it validates as
(`CHRONICLE_CHECK_REPLIES` checks it against that model).
"""

from __future__ import annotations

import functools
import types
import typing
from datetime import datetime
from typing import Any, Generic, TypeAlias, TypeVar
from uuid import UUID

import orjson
from chronicle_contract.base import Reply
from pydantic import BaseModel

ReplyT = TypeVar("ReplyT", bound=Reply)


class Wire(dict[str, Any], Generic[ReplyT]):
    """A reply as the wire carries it (JSON-ready: what orjson encodes), typed by its model."""


Answer: TypeAlias = ReplyT | Wire[ReplyT]


def wire(reply: Reply | dict[str, Any]) -> dict[str, Any]:
    """What the wire carries for a reply: the fields the handler gave, in the model's order,
    in JSON's own types (ids and times as text, as orjson writes them), which is also what an
    idempotency record gives back when a command is repeated: the bus's callers see the
    same either way. A field left at its default is not sent, as a dict's missing key was
    not: the bus adds `position` last, once the events are stored."""
    if isinstance(reply, dict):  # shaped already (a Wire, or a dict from a test's handler)
        return reply
    as_text = text_fields(type(reply))
    if as_text is None:  # models inside: dumped, then made JSON's types as the wire does it
        return orjson.loads(orjson.dumps(reply.model_dump(exclude_unset=True), option=orjson.OPT_NON_STR_KEYS))
    # A flat reply (every command's on the hot path) skips model_dump's walk and the round
    # trip: with the model's validation, ~1.5 µs a reply more than the dict it replaced.
    given = reply.__pydantic_fields_set__
    data = {name: value for name, value in reply.__dict__.items() if name in given}
    for name in as_text:
        value = data.get(name)
        if value is not None:
            data[name] = str(value) if type(value) is UUID else value.isoformat()  # (as orjson writes a time)
    return data


@functools.cache
def text_fields(model: type[BaseModel]) -> frozenset[str] | None:
    """The fields of `model` that hold an id or a time (sent as text), when every other field
    holds JSON's own types; None when one may hold anything else (another model)."""
    as_text = set()
    for name, field in model.model_fields.items():
        union = typing.get_origin(field.annotation) in (typing.Union, types.UnionType)
        kinds = set(typing.get_args(field.annotation)) - {type(None)} if union else {field.annotation}
        if kinds <= {UUID} or kinds <= {datetime}:
            as_text.add(name)
        elif not all(is_json(kind) for kind in kinds):
            return None
    return frozenset(as_text)


def is_json(annotation: Any) -> bool:
    """Whether values of this type are JSON's own: text, numbers, booleans, None, and lists
    and dicts of them (a request's JSON objects, rows)."""
    if annotation in (str, int, float, bool, type(None), Any):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return True
    if origin in (list, dict, typing.Union, types.UnionType):
        return all(is_json(argument) for argument in typing.get_args(annotation))
    return False
