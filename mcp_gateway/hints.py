"""Next-action hints (issue #32 item 6): the call an agent would make next.

Each tool that has one names it from its own result: read the top hit,
continue a cut page, see where a definition is used. A hint is
``{"tool", "arguments", "why"}``, ready to send; the result carries them in
``_meta`` (:data:`META_NEXT`) and its text ends with a line naming the first,
so an agent whose client shows only the text sees it too.
"""

from __future__ import annotations

import json

from kernel.jsontypes import JsonObject

META_NEXT = "dir2mcp/next"
#: the hints a result carries at most
MOST = 3


def line(actions: list[JsonObject]) -> str:
    first = actions[0]
    arguments = json.dumps(first["arguments"], ensure_ascii=False, separators=(",", ":"))
    return f"Next: {first['tool']} {arguments} ({first['why']})"


def hint(tool: str, arguments: JsonObject, why: str) -> JsonObject:
    return {"tool": tool, "arguments": arguments, "why": why}


def span_arguments(span: JsonObject | None) -> JsonObject:
    """``dir2mcp.open_file``'s range arguments for a span."""
    if not span:
        return {}
    if span.get("kind") == "page":
        return {"page": span["page"]}
    if span.get("kind") == "time":
        return {"start_ms": span["start_ms"], "end_ms": span["end_ms"]}
    return {"start_line": span["start_line"], "end_line": span["end_line"]}


def open_slice(item: JsonObject, why: str) -> JsonObject:
    return hint("dir2mcp.open_file", {"rel_path": item["rel_path"], **span_arguments(item.get("span"))}, why)


def _continue(tool: str, result: JsonObject, args: JsonObject, why: str) -> list[JsonObject]:
    """The same call again from ``next_cursor``, when the result has one."""
    cursor = result.get("next_cursor")
    return [hint(tool, args | {"cursor": cursor}, why)] if cursor else []


def search(result: JsonObject, args: JsonObject) -> list[JsonObject]:
    hits = result.get("hits") or []
    found = [open_slice(hits[0], "read the top hit")] if hits and "content" not in hits[0] else []
    more = _continue("dir2mcp.search", result, args, "the hits after these")
    return (found + more)[:MOST]


def ask(result: JsonObject, args: JsonObject) -> list[JsonObject]:
    citations = result.get("citations") or []
    return [open_slice(citations[0], "check the first citation")] if citations else []


def open_file(result: JsonObject, args: JsonObject) -> list[JsonObject]:
    span = result.get("span") or {}
    if not result.get("truncated") or span.get("kind") != "lines":
        return []
    start = span["end_line"] + 1
    arguments = {"rel_path": result["rel_path"], "start_line": start}
    return [hint("dir2mcp.open_file", arguments, "the lines after these")]


def find(result: JsonObject, args: JsonObject) -> list[JsonObject]:
    matches = result.get("matches") or []
    found = [open_slice(matches[0], "read the first match")] if matches and matches[0].get("span") else []
    return (found + _continue("dir2mcp.find", result, args, "the next page"))[:MOST]


def symbols(result: JsonObject, args: JsonObject) -> list[JsonObject]:
    found = result.get("symbols") or []
    if not found:
        return []
    first = found[0]
    return [
        open_slice(first, f"read the definition of {first['name']}"),
        hint("dir2mcp.references", {"name": first["name"]}, f"where {first['name']} is used"),
    ]


def references(result: JsonObject, args: JsonObject) -> list[JsonObject]:
    return _continue("dir2mcp.references", result, args, "the next page")
