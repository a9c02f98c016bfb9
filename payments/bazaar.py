"""Bazaar discovery metadata (x402 ``bazaar`` extension) for paid tools.

Optional and additive: without it, or when a tool has no catalog entry,
the PaymentRequired simply carries no ``extensions.bazaar``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from x402.extensions.bazaar import declare_mcp_discovery_extension
from x402.extensions.bazaar.resource_service import DeclareMcpDiscoveryConfig

from kernel.jsontypes import JsonObject


@dataclass(frozen=True)
class ToolInfo:
    """What the catalog says about one tool (from the MCP tool registry)."""

    description: str
    input_schema: JsonObject


def discovery_extension(
    tool_name: str,
    info: ToolInfo | None,
    *,
    example: JsonObject | None = None,
    description: str = "",
) -> JsonObject:
    """``{"bazaar": {...}}`` for ``tool_name``, or ``{}`` when nothing is known about it."""
    if info is None:
        return {}
    config = DeclareMcpDiscoveryConfig(
        tool_name=tool_name,
        description=(info.description or description or None),
        transport="streamable-http",
        input_schema=info.input_schema,
        example=example or None,
    )
    return declare_mcp_discovery_extension(config)


def catalog_from(tools: Mapping[str, ToolInfo | JsonObject] | None) -> dict[str, ToolInfo]:
    """Accept ``{name: ToolInfo}`` or ``{name: {"description", "inputSchema"}}``."""
    out: dict[str, ToolInfo] = {}
    for name, value in (tools or {}).items():
        if isinstance(value, ToolInfo):
            out[name] = value
        elif isinstance(value, Mapping):
            schema = value.get("inputSchema") or value.get("input_schema") or {"type": "object"}
            out[name] = ToolInfo(str(value.get("description") or ""), dict(schema))
    return out
