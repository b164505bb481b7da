"""Walks over JSON schemas that the schema tests share."""

from __future__ import annotations

from typing import Any


def integers_without_maximum(schema: Any, components: dict[str, Any], path: str = "") -> list[str]:
    """Integers without an upper bound, following `$ref`s into the components (each once a path)."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[-1]
            if f"->{name}" in path:
                return []
            return integers_without_maximum(components[name], components, f"{path}->{name}")
        found = [path] if schema.get("type") == "integer" and not {"maximum", "exclusiveMaximum"} & set(schema) else []
        return found + [p for key, value in schema.items() for p in integers_without_maximum(value, components, f"{path}/{key}")]
    if isinstance(schema, list):
        return [p for i, value in enumerate(schema) for p in integers_without_maximum(value, components, f"{path}/{i}")]
    return []
