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
import typing
from typing import Any, Generic, TypeAlias, TypeVar

import orjson
from chronicle_contract.base import Reply
from pydantic import BaseModel

ReplyT = TypeVar("ReplyT", bound=Reply)


class Wire(dict[str, Any], Generic[ReplyT]):
    """A reply as the wire carries it (JSON-ready: what orjson encodes), typed by its model."""


Answer: TypeAlias = ReplyT | Wire[ReplyT]


def wire(reply: Reply | dict[str, Any]) -> dict[str, Any]:
    """What the wire carries for a reply: the fields the handler gave, in the model's order,
    in JSON's own types (ids and times as orjson writes them), which is also what an
    idempotency record gives back when a command is repeated: the bus's callers see the
    same either way. A field left at its default is not sent, as a dict's missing key was
    not: the bus adds `position` last, once the events are stored."""
    if not isinstance(reply, BaseModel):
        return reply
    if is_flat(type(reply)):
        # (model_dump walks the model's schema; for a flat reply this costs half as much)
        given = reply.__pydantic_fields_set__
        fields = {name: value for name, value in reply.__dict__.items() if name in given}
    else:
        fields = reply.model_dump(exclude_unset=True)
    return orjson.loads(orjson.dumps(fields, option=orjson.OPT_NON_STR_KEYS))


@functools.cache
def is_flat(model: type[BaseModel]) -> bool:
    """Whether no field of `model` may hold another model (then its values need no dump)."""
    return not any(holds_model(field.annotation) for field in model.model_fields.values())


def holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(holds_model(argument) for argument in typing.get_args(annotation))
