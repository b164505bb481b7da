"""The wire contract's building blocks: request bases that refuse unknown fields, bounded text
and JSON fields, reply bases. Limits come from the domain so the edge and the aggregates
enforce the same rules."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar
from uuid import UUID

import orjson
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    StringConstraints,
    ValidationInfo,
)
from pydantic_core import CoreSchema, PydanticCustomError

from chronicle_contract.errors import ChronicleError
from chronicle_contract.values import MAX_CONTENT, MAX_TAG_LENGTH, MAX_TAGS, MAX_TITLE


def no_nul(text: str) -> str:
    # Postgres text and jsonb cannot hold NUL; refusing it here keeps it out of the log.
    if "\x00" in text:
        raise ValueError("must not contain NUL characters")
    return text


@dataclass(frozen=True)
class Text:
    """A request's text field, as `Annotated[str, Text(500)]`: length limits, not blank
    (unless `may_be_blank`), no NUL. The type checker sees a str; pydantic the rules."""

    max_length: int
    may_be_blank: bool = False

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        constraints = StringConstraints(
            min_length=0 if self.may_be_blank else 1,
            max_length=self.max_length,
            # (not blank as Python's str.strip sees it, which also strips \x1c-\x1f and \x85)
            pattern=None if self.may_be_blank else r"[^\s\x1c-\x1f\x85]",
        )
        return handler.generate_schema(Annotated[str, constraints, AfterValidator(no_nul)])


Tag = Annotated[str, Text(MAX_TAG_LENGTH)]


Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]


Title = Annotated[str, Text(MAX_TITLE)]


Content = Annotated[str, Text(MAX_CONTENT)]


Role = Literal["user", "agent", "system"]


def check_json_values(value: Any, path: str = "") -> Any:
    """Refuse what storing and reading back would change or refuse: integers beyond 64
    bits, NaN, infinity, NUL characters."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"text at {path or 'top level'} must not contain NUL characters")
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            raise ValueError(f"integer at {path or 'top level'} does not fit in 64 bits")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"number at {path or 'top level'} must be finite")
    elif isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                raise ValueError(f"keys at {path or 'top level'} must not contain NUL characters")
            check_json_values(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_json_values(item, f"{path}[{index}]")
    return value


# The service validates requests with {MAX_JSON_BYTES: its limit} as pydantic's context
# (CHRONICLE_MAX_JSON_BYTES): a JSON field bigger than that, as compact JSON, is refused
# before it costs memory or a write. Models built elsewhere (the client, the gateways) leave
# the size to the service.
MAX_JSON_BYTES = "max_json_bytes"


def check_json_size(value: Any, info: ValidationInfo) -> Any:
    limit = (info.context or {}).get(MAX_JSON_BYTES)
    if limit is not None and len(orjson.dumps(value)) > limit:
        raise PydanticCustomError("max_bytes", "must be at most {limit} bytes as JSON", {"limit": limit})
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(check_json_values), AfterValidator(check_json_size)]


def empty_object(**field: Any) -> Any:
    """A request field that defaults to `{}`, made afresh for each request: a `{}` default
    is deep-copied by pydantic on every validation (~2 µs of an add_message's parse). The
    published schema still says `"default": {}`."""
    return Field(default_factory=dict, json_schema_extra={"default": {}}, **field)


def empty_list(**field: Any) -> Any:
    """As `empty_object`, for a field that defaults to `[]`."""
    return Field(default_factory=list, json_schema_extra={"default": []}, **field)


class Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


ReplyT = TypeVar("ReplyT", bound=Reply)


class Request(BaseModel, Generic[ReplyT]):
    """A request names, once, what it is and what it gets back: `action` (its subject is
    `<prefix>.cmd.<action>` or `<prefix>.query.<action>`; an internal command's action only
    names it) and, as its type parameter, the reply model. The service and ChronicleClient
    both read them from here.

        class StartConversation(Command[ConversationStarted], action="conversation.start"): ...
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    action: ClassVar[str] = ""
    reply: ClassVar[type[Reply]] = Reply

    def __init_subclass__(cls, *, action: str | None = None, reply: type[Reply] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)  # (pydantic hands action and reply on to the hook below)

    @classmethod
    def __pydantic_init_subclass__(
        cls, *, action: str | None = None, reply: type[Reply] | None = None, **kwargs: Any
    ) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if action is not None:
            cls.action = action
        # `reply=`: an internal command that answers more than the request it extends.
        cls.reply = reply or next(
            (arg for base in cls.__mro__ for arg in generic_arguments(base) if isinstance(arg, type)), Reply
        )


def generic_arguments(model: type) -> tuple[Any, ...]:
    metadata = getattr(model, "__pydantic_generic_metadata__", None)
    return metadata["args"] if metadata and metadata["origin"] is not None else ()


class Command(Request[ReplyT], Generic[ReplyT]):
    def aggregate_ids(self) -> list[UUID]:
        """Aggregates the handler will load, so a batch can fetch them in one query: the
        ids its `..._id` fields hold."""
        named = self.__dict__
        return [v for v in map(named.get, id_fields(type(self))) if isinstance(v, UUID)]


@functools.cache
def id_fields(model: type[BaseModel]) -> tuple[str, ...]:
    """A model's fields named `..._id`, worked out once per model (every command asks, in
    every group commit)."""
    return tuple(name for name in model.model_fields if name.endswith("_id"))


MAX_IDEMPOTENCY_KEY = 200  # characters


def idempotency_key(value: str | None) -> str | None:
    """The Idempotency-Key header as a request gives it, checked before it costs anything:
    at most MAX_IDEMPOTENCY_KEY printable characters; an empty one is none."""
    if not value:
        return None
    if len(value) > MAX_IDEMPOTENCY_KEY or not value.isprintable():
        message = f"Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters"
        raise ChronicleError("invalid", message, [{"field": "Idempotency-Key", "rule": "max_length", "message": message}])
    return value


# Log positions and versions are Postgres bigints; a larger number is no position at all.
MAX_POSITION = 2**63 - 1
# Paging by offset makes Postgres walk past every skipped row: deeper than this, page on.
MAX_OFFSET = 100_000
Position = Annotated[int, Field(ge=0, le=MAX_POSITION)]
Offset = Annotated[int, Field(ge=0, le=MAX_OFFSET, description=f"rows to skip (at most {MAX_OFFSET:,})")]


# A list page's `cursor`: the page after the one that gave it (`offset`, if given too, skips
# that many rows after it).
PageCursor = Annotated[
    Annotated[str, StringConstraints(min_length=1, max_length=4_000, pattern=r"^[A-Za-z0-9_-]+$")] | None,
    Field(description="continue after the page that gave this next_cursor: unlike an offset, rows added since"
          " are neither shown again nor skipped"),
]


class Query(Request[ReplyT], Generic[ReplyT]):
    min_position: Position | None = Field(default=None, description="wait until read models include this notification id")


class Written(Reply):
    """What every command answers: the ids it made and the log position of its last event."""

    position: int | None = None


T = TypeVar("T")


class Page(Reply, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int
    next_cursor: str | None = Field(default=None, description="the next page's cursor; None on the last page")
