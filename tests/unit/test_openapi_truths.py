"""What the OpenAPI document states so that a tester needs no telling: strings without NUL,
the pareto query's objectives each carrying its direction, a layout node's type as the domain
takes it."""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from chronicle_contract.optimizations import ParetoQuery
from pydantic import ValidationError

from domain.errors import InvalidCommand
from domain.layout import check_layout
from entrypoints.gateways.nul_free import JSON_VALUE, NO_NUL, NOT_BLANK_NO_NUL, nul_free
from entrypoints.gateways.rest import openapi_document
from entrypoints.gateways.rest_routes import OBJECTIVE, ROUTES, pareto_fields
from tests.unit.json_schemas import integers_without_maximum


def strings(schema: Any) -> list[dict[str, Any]]:
    found = []
    if isinstance(schema, dict):
        if schema.get("type") == "string" and not {"format", "enum", "const"} & set(schema):
            found.append(schema)
        for value in schema.values():
            found += strings(value)
    elif isinstance(schema, list):
        for value in schema:
            found += strings(value)
    return found


def test_every_string_the_service_takes_or_stores_refuses_nul() -> None:
    document = openapi_document(ROUTES)
    stored = {name: schema for name, schema in document["components"]["schemas"].items() if name != "Error"}
    for schema in strings(stored) + strings(document["paths"]):
        patterns = [schema.get("pattern", "")] + [part.get("pattern", "") for part in schema.get("allOf", ())]
        assert any(re.search(p, "ok") and not re.search(p, "o\x00k") for p in patterns if p), schema


def test_text_stays_not_blank_and_free_json_is_nul_free_at_any_depth() -> None:
    text = nul_free({"type": "string", "pattern": "[^\\s\\x1c-\\x1f\\x85]"})
    assert text["pattern"] == NOT_BLANK_NO_NUL
    assert re.search(NOT_BLANK_NO_NUL, " a ") and not re.search(NOT_BLANK_NO_NUL, "   ")
    assert not re.search(NOT_BLANK_NO_NUL, "a\x00")
    free = nul_free({"type": "object", "additionalProperties": True})
    assert free["additionalProperties"] == {"$ref": JSON_VALUE} and free["propertyNames"] == {"pattern": NO_NUL}
    assert nul_free({"description": "any value"})["allOf"] == [{"$ref": JSON_VALUE}]
    closed = nul_free({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False})
    assert "propertyNames" not in closed


@pytest.mark.parametrize("node_type", ["page", " a ", "", " ", "\t\n", "\x1e", "\x1c\x1f", "\x85", "\u00a0", "\u3000", "\x1ea"])
def test_a_layout_nodes_type_pattern_takes_what_the_domain_takes(node_type: str) -> None:
    # Read as a tester reads it (ECMA regular expressions, whose \s is not Python's): schemathesis
    # once sent "\x1e", which the pattern "\S" took and str.strip calls blank.
    schema = openapi_document(ROUTES)["components"]["schemas"]["LayoutNode"]["properties"]["type"]
    try:
        check_layout({"type": node_type})
        taken = True
    except InvalidCommand:
        taken = False
    assert jsonschema_rs.validator_for(schema).is_valid(node_type) is taken


@pytest.mark.parametrize(("given", "objectives", "directions"), [
    (["score"], ["score"], None),
    (["score:minimize", "length:maximize"], ["score", "length"], {"score": "minimize", "length": "maximize"}),
    (["a:b"], ["a:b"], None),  # not a direction: part of the name
    ([" :maximize"], [" :maximize"], None),  # a blank name before it: the whole is the name
])
def test_pareto_objectives_carry_their_directions(given: list[str], objectives: list[str],
                                                  directions: dict[str, str] | None) -> None:
    fields = pareto_fields({"optimization_id": "x", "objectives": given})
    assert fields["objectives"] == objectives and fields.get("directions") == directions


def objective_valid(item: str) -> bool:
    """The item's schema (OBJECTIVE), read as a tester reads it."""
    def matches(branch: dict[str, Any]) -> bool:
        patterns = [branch.get("pattern")] + [part["pattern"] for part in branch.get("allOf", ())]
        return len(item) <= branch.get("maxLength", len(item)) and all(
            re.search(p, item) for p in patterns if p is not None)
    return any(matches(branch) for branch in OBJECTIVE["anyOf"])


@pytest.mark.parametrize("item", ["score", "score:minimize", "a:b", " :maximize", " ", "x" * 200 + ":maximize",
                                  "x" * 201 + ":minimize", "x" * 201, "ok\x00"])
def test_the_objective_schema_says_what_the_query_accepts(item: str) -> None:
    """Schema-valid items are accepted and schema-invalid ones refused: no rule between
    parameters is left for the service alone to know."""
    fields = pareto_fields({"optimization_id": "7f9b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "objectives": [item]})
    try:
        ParetoQuery(**fields)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == objective_valid(item)


def test_the_older_directions_stay_accepted_and_undeclared() -> None:
    fields = pareto_fields({"optimization_id": "x", "objectives": ["length"], "directions": {"length": "minimize"}})
    assert fields["directions"] == {"length": "minimize"}
    parameters = openapi_document(ROUTES)["paths"]["/api/optimizations/{optimizationId}/pareto"]["get"]["parameters"]
    assert "directions" not in {p["name"] for p in parameters} and "objectives" in {p["name"] for p in parameters}


def test_every_integer_a_caller_sends_has_a_maximum() -> None:
    """(A 27-digit afterRound once reached Postgres and came back as a 500.)"""
    document = openapi_document(ROUTES)
    components = document["components"]["schemas"]
    sent = {
        f"{method} {path}": {"parameters": operation.get("parameters", []), "body": operation.get("requestBody", {})}
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    }
    assert integers_without_maximum(document["paths"], components) != []  # (replies' counts: the walk sees integers)
    assert integers_without_maximum(sent, components) == []
