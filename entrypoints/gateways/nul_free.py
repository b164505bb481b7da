"""The OpenAPI document's strings say what the service holds true: no text anywhere (a field,
a free JSON object's keys and values) contains NUL, which Postgres text and jsonb cannot store
and every request refuses (`invalid`). Applied to each generated schema, so a tester reads the
rule instead of being told it."""

from __future__ import annotations

from typing import Any

NO_NUL = "^[^\\x00]*$"
JSON_VALUE = "#/components/schemas/JsonValue"
# Text's "not blank" search pattern (chronicle_contract.base.Text), as one anchored pattern
# that also excludes NUL: some character that is not blank, and no NUL anywhere.
NOT_BLANK = "[^\\s\\x1c-\\x1f\\x85]"
NOT_BLANK_NO_NUL = "^[^\\x00]*[^\\s\\x1c-\\x1f\\x85\\x00][^\\x00]*$"
COMPOSITE = ("$ref", "anyOf", "oneOf", "allOf", "not", "enum", "const", "type", "properties", "items")
SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMAS = ("items", "not", "additionalProperties", "propertyNames")

# Any JSON value the service stores: strings and keys free of NUL, at any depth.
JSON_VALUE_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "null"}, {"type": "boolean"}, {"type": "number"}, {"type": "string", "pattern": NO_NUL},
    {"type": "array", "items": {"$ref": JSON_VALUE}},
    {"type": "object", "propertyNames": {"pattern": NO_NUL}, "additionalProperties": {"$ref": JSON_VALUE}},
]}


def nul_free(schema: Any) -> Any:
    """The schema with every string, free object and unconstrained value declared NUL-free."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: nul_free(item) for name, item in out[key].items()}
    for key in SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [nul_free(item) for item in out[key]]
    for key in SUBSCHEMAS:
        if isinstance(out.get(key), dict):
            out[key] = nul_free(out[key])
    types = out.get("type")
    kinds = set(types) if isinstance(types, list) else {types} if isinstance(types, str) else set()
    if "string" in kinds and "format" not in out and "enum" not in out and "const" not in out:
        pattern = out.get("pattern")
        if pattern is None:
            out["pattern"] = NO_NUL
        elif pattern == NOT_BLANK:
            out["pattern"] = NOT_BLANK_NO_NUL
        elif not (pattern.startswith("^") and pattern.endswith("$") and "\\x00" not in pattern):
            out["allOf"] = [*out.get("allOf", ()), {"pattern": NO_NUL}]
        # (else an anchored pattern of our own: its characters are all named, NUL not among them)
    if "object" in kinds:
        extra = out.get("additionalProperties", True)
        if extra is not False:
            out["propertyNames"] = {"pattern": NO_NUL}
            if extra is True or extra == {}:
                out["additionalProperties"] = {"$ref": JSON_VALUE}
    if "array" in kinds and "items" not in out and "prefixItems" not in out:
        out["items"] = {"$ref": JSON_VALUE}
    if not any(key in out for key in COMPOSITE):  # any JSON value (a candidate, a best_candidate)
        out["allOf"] = [{"$ref": JSON_VALUE}]
    return out
