"""camelCase on the web, snake_case on the bus: renames a model's own field names, never the
keys of a free JSON object inside it (a message's metadata, a layout), led by the model's
JSON schema."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]


# Names are converted on every request, so the conversions are remembered; the names come
# from requests too, so at most this many, each short: a longer one is converted afresh.
REMEMBERED_NAMES = 4096
REMEMBERED_LENGTH = 64


def to_camel(name: str) -> str:
    return _camel(name) if len(name) <= REMEMBERED_LENGTH else _camel.__wrapped__(name)


def to_snake(name: str) -> str:
    return _snake(name) if len(name) <= REMEMBERED_LENGTH else _snake.__wrapped__(name)


@lru_cache(maxsize=REMEMBERED_NAMES)
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@lru_cache(maxsize=REMEMBERED_NAMES)
def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def camel_path(path: str) -> str:
    """A validation error's field path (`messages.limit`, `tags.0`) as the web names it."""
    return ".".join(to_camel(part) for part in path.split("."))


Convert = Callable[[Any], Any]


class Casing:
    """One model's renaming, both ways: `web(data)` for a reply on its way out (snake to
    camel; what the model does not declare is left out), `bus(data)` for a request on its
    way in (camel to the model's own names; a key the model does not declare is passed as
    given, so the model refuses it by that name). Each direction is compiled once from the
    schema into nested converters; a part with nothing to rename is passed as it is."""

    def __init__(self, model: type[BaseModel], mode: str):
        self.schema = model.model_json_schema(mode=mode)  # type: ignore[arg-type]
        self.definitions: dict[str, Schema] = self.schema.get("$defs", {})
        self.web: Convert = self._compile(self.schema, outward=True, seen=()) or (lambda data: data)
        self.bus: Convert = self._compile(self.schema, outward=False, seen=()) or (lambda data: data)

    def _resolve(self, schema: Schema) -> Schema:
        while "$ref" in schema:
            schema = self.definitions[schema["$ref"].rsplit("/", 1)[-1]]
        return schema

    def _compile(self, schema: Schema, outward: bool, seen: tuple[str, ...]) -> Convert | None:
        reference = schema.get("$ref")
        if reference in seen:  # a recursive model: deeper levels pass as they are
            return None
        seen = (*seen, reference) if reference else seen
        schema = self._resolve(schema)
        properties = self._part(schema, "properties")
        items = self._part(schema, "items")
        to_object = None if properties is None else self._object(properties, outward, seen)
        item = None if items is None else self._compile(items, outward, seen)
        to_list = None if item is None else (lambda value: [item(v) for v in value])
        if to_object is None and to_list is None:
            return None

        def convert(value: Any) -> Any:
            if to_object is not None and isinstance(value, dict):
                return to_object(value)
            if to_list is not None and isinstance(value, list):
                return to_list(value)
            return value

        return convert

    def _object(self, properties: dict[str, Schema], outward: bool, seen: tuple[str, ...]) -> Convert:
        names = renames(tuple(properties), outward)
        inner = {name: self._compile(properties[name], outward, seen) for name in properties}
        # the key given -> (the key written, its value's converter or None)
        if outward:  # own name -> camelCase
            plan = {own: (camel, inner[own]) for own, camel in names.items()}
        else:  # camelCase or own name -> own name
            plan = {given: (own, inner[own]) for given, own in names.items()}

        def convert(value: dict[str, Any]) -> dict[str, Any]:
            out = {}
            for key, item in value.items():
                step = plan.get(key)
                if step is None:
                    if not outward:
                        out[key] = item
                    continue
                name, inner_convert = step
                out[name] = item if inner_convert is None else inner_convert(item)
            return out

        return convert

    def _part(self, schema: Schema, key: str) -> dict[str, Any] | None:
        """The schema's `properties` or `items`, or the first of its branches' (anyOf, oneOf)."""
        if isinstance(schema.get(key), dict):
            return dict(schema[key])
        for branch in [*schema.get("anyOf", ()), *schema.get("oneOf", ())]:
            found = self._part(self._resolve(branch), key)
            if found is not None:
                return found
        return None


@cache
def renames(fields: tuple[str, ...], outward: bool) -> dict[str, str]:
    """Outward: own name -> camelCase; inward: camelCase (and the own name) -> own name."""
    if outward:
        return {field: to_camel(field) for field in fields}
    return {**{field: field for field in fields}, **{to_camel(field): field for field in fields}}


@cache
def casing(model: type[BaseModel], mode: str = "serialization") -> Casing:
    return Casing(model, mode)


def web_schema(schema: Any) -> Any:
    """A JSON schema as the web sees it: every declared property (and `required`) in camelCase."""
    if isinstance(schema, list):
        return [web_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            converted[key] = {to_camel(name): web_schema(item) for name, item in value.items()}
        elif key == "required" and isinstance(value, list):
            converted[key] = [to_camel(name) for name in value]
        else:
            converted[key] = web_schema(value)
    return converted
