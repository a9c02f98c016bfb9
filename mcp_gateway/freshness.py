"""Every answer says how fresh it is (issue #37 item 4).

A tool declared with :func:`declared` names the files its result cites
(``cites``); :func:`attach` adds ``freshness`` (:mod:`corpus.freshness`) to
each of its results, so an agent tells a stale answer from a fresh one
without calling ``stats``. After a budget cut, :func:`narrow` keeps ``stale``
to the files the kept items cite, and :func:`note` is the line the text
gains when the answer is not fresh (a client may show the model only the
text). It counts against ``max_tokens`` like the rest of the result: a few
dozen tokens, more only for stale files.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from corpus.freshness import MAX_CHECKED, freshness
from kernel.jsontypes import JsonObject
from mcp_gateway.registry import Tool

FIELD = "freshness"
#: stale files the text names at most
NAMED = 3

OUTPUT = {
    "type": "object",
    "description": (
        "How fresh this answer is: changes the index has not caught up with. Files in stale changed on "
        "disk since they were indexed: read them with dir2mcp.open_file, or ask again once live sync "
        "has indexed them (pending_changes 0, indexing false)."
    ),
    "additionalProperties": False,
    "properties": {
        "pending_changes": {
            "type": "integer",
            "minimum": 0,
            "description": (
                "Changed paths live sync has seen and not yet indexed, of those the exclusion policy "
                "would index (0 without live sync)."
            ),
        },
        "indexing": {
            "type": "boolean",
            "description": "An indexing pass or a live-sync batch is running now.",
        },
        "stale": {
            "type": "array",
            "items": {"type": "string"},
            "description": (
                "The files this answer cites whose size or modification time on disk differs from what "
                "was indexed, or that are gone: their indexed text may not be what the file says now."
            ),
        },
        "unchecked": {
            "type": "integer",
            "description": f"Cited files past the first {MAX_CHECKED}, not checked.",
        },
        "as_of": {
            "type": "string",
            "description": "When the index was last written (UTC, ISO 8601); absent before the first pass.",
        },
    },
    "required": ["pending_changes", "indexing", "stale"],
}

Cites = Callable[[JsonObject], Iterable[str]]


def items(*fields: str) -> Cites:
    """The ``rel_path`` of each item of these list fields."""

    def cited(result: JsonObject) -> Iterable[str]:
        for name in fields:
            for item in result.get(name) or ():
                yield item.get("rel_path", "")

    return cited


def own_path(result: JsonObject) -> Iterable[str]:
    """A result about one file: its ``rel_path``."""
    return [result.get("rel_path", "")]


def declared(tool: Tool, cites: Cites) -> Tool:
    """``tool`` with ``freshness`` in its output, citing what ``cites`` names."""
    out = copy.deepcopy(tool.output_schema)
    out["properties"][FIELD] = OUTPUT  # always there, but not required: the spec's schemas stay as they are
    return replace(tool, output_schema=out, cites=cites)


def citing(tools: tuple[Tool, ...], cites: dict[str, Cites]) -> tuple[Tool, ...]:
    """``tools``, each named in ``cites`` :func:`declared` with what it cites."""
    unknown = set(cites) - {tool.name for tool in tools}
    if unknown:
        raise ValueError(f"no such tools: {sorted(unknown)}")
    return tuple(declared(tool, cites[tool.name]) if tool.name in cites else tool for tool in tools)


def attach(tool: Tool, result: JsonObject, root: Path) -> JsonObject:
    """``result`` with its ``freshness``, when ``tool`` declares what it cites."""
    if tool.cites is None:
        return result
    return result | {FIELD: freshness(root, tool.cites(result)).as_dict()}


def narrow(tool: Tool, result: JsonObject) -> JsonObject:
    """After a cut: ``stale`` keeps only the files the result still cites."""
    found = result.get(FIELD)
    if tool.cites is None or not found or not found["stale"]:
        return result
    cited = set(tool.cites(result))
    return result | {FIELD: found | {"stale": [rel for rel in found["stale"] if rel in cited]}}


def note(result: JsonObject) -> str | None:
    """The text's line for an answer that is not fresh; None for a fresh one."""
    found = result.get(FIELD)
    if not found or not (found["pending_changes"] or found["stale"]):
        return None
    parts = []
    if found["pending_changes"]:
        parts.append(f"{found['pending_changes']} changed paths not yet indexed")
    stale = found["stale"]
    if stale:
        named = ", ".join(stale[:NAMED]) + (f" and {len(stale) - NAMED} more" if len(stale) > NAMED else "")
        parts.append(f"changed on disk since indexed: {named}")
    return f"(Freshness: {'; '.join(parts)}.)"
