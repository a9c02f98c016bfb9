"""The type of a JSON object as the project passes it around.

JSON-RPC messages, tool arguments and results, REST bodies and configuration
sections are dicts whose values are checked where they enter (the tool
schemas, pydantic models, the config loader), not by the type checker.
"""

from __future__ import annotations

from typing import Any, TypeAlias

# Any because json.loads, jsonschema and pydantic's model_dump hand back
# untyped values: a value's type is known only after its schema check, and
# object would force a cast at every read of a payload already validated.
JsonObject: TypeAlias = dict[str, Any]
