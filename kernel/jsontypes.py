"""The types of JSON values as the project passes them around.

JSON-RPC messages, tool arguments and results, REST bodies and configuration
sections are dicts whose values are checked where they enter (the tool
schemas, pydantic models, the config loader), not by the type checker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeAlias

# Any: json.loads, jsonschema and pydantic's model_dump hand back untyped
# values: a value's type is known only after its schema check, and object
# would force a cast at every read of a payload already validated.
JsonObject: TypeAlias = dict[str, Any]

#: One JSON value of any kind, for code that takes or returns whichever kind
#: it is given (a JSON-RPC id, a node of a schema walked recursively).
JsonValue: TypeAlias = "str | int | float | bool | None | list[JsonValue] | dict[str, JsonValue]"


def walk(data: object) -> Iterator[object]:
    """Every value in a parsed JSON or YAML document, ``data`` itself first
    and mapping keys included, depth first without recursion (a document
    nested past Python's recursion limit is walked too); a value an alias
    repeats is visited each time it is reached."""
    pending = [data]
    while pending:
        value = pending.pop()
        yield value
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
