"""Every tool argument is bounded by its schema, so the cost of refusing or
running a call does not grow with what a client sends (docs/security.md,
"Bounds on every request"): ``doc_types`` was a list of any length, and
200,000 of them made one search cost about 12 s of the server's CPU (each
one a bound SQL parameter) where a search costs a few milliseconds."""

from __future__ import annotations

import pytest

from kernel import errors
from mcp_gateway import registry, tools
from mcp_gateway.registry import Tool


def unbounded(node: object, at: str = "") -> list[str]:
    """Where ``node`` (a JSON schema) lets an array or a string grow without bound."""
    found = []
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "array" and "maxItems" not in node:
            found.append(f"{at}: array without maxItems")
        kinds = kind if isinstance(kind, list) else [kind]
        if "string" in kinds and "maxLength" not in node and "enum" not in node:
            found.append(f"{at}: string without maxLength")
        for key, value in node.items():
            found += unbounded(value, f"{at}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += unbounded(value, f"{at}[{i}]")
    return found


def every_tool() -> list[Tool]:
    return list(registry.table().values())


@pytest.mark.parametrize("tool", every_tool(), ids=lambda tool: tool.name)
def test_every_array_and_string_argument_has_a_bound(tool):
    assert unbounded(tool.input_schema) == []


@pytest.mark.parametrize("name", ["dir2mcp.search", "dir2mcp.ask", "dir2mcp.find"])
def test_a_long_doc_types_list_is_invalid_range_without_echoing_it(name):
    tool = registry.table()[name]
    arguments = {"query": "x", "question": "x", "doc_types": [f"type{i}" for i in range(10_000)]}
    arguments = {key: value for key, value in arguments.items() if key in tool.input_schema["properties"]}
    with pytest.raises(errors.Dir2mcpError) as caught:
        tools.validate_arguments(tool, arguments)
    assert caught.value.code == errors.INVALID_RANGE
    assert "doc_types" in caught.value.message
    assert len(caught.value.message) < 200  # jsonschema's own message quotes the whole list
