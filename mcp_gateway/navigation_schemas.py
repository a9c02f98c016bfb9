"""Schemas of the navigation tools (issue #32), part of the contract like :mod:`schemas`."""

from __future__ import annotations

import copy

from mcp_gateway.schemas import SPAN, path_argument

MAX_ENTRIES = 5000

OUTLINE_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": path_argument("The file, relative to the root."),
        "max_entries": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_ENTRIES,
            "default": 500,
            "description": (
                "The most entries returned. Past it the outer levels are kept first (every top-level "
                "definition before any member), and truncated is true."
            ),
        },
    },
    "required": ["rel_path"],
}

OUTLINE_ENTRY = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "kind": {
            "type": "string",
            "description": "function, method, class, interface, struct, enum, type, module, …; heading; page",
        },
        "name": {"type": "string"},
        "signature": {"type": "string", "description": "The definition's first line (a heading's title)."},
        "span": {"$ref": "#/$defs/Span"},
        "line": {
            "type": "integer",
            "description": "The signature's line, where the span starts above it (decorators, attributes).",
        },
        "children": {"type": "array", "items": {"$ref": "#/$defs/OutlineEntry"}},
    },
    "required": ["kind", "name", "signature", "span"],
}

OUTLINE_OUTPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": {"type": "string"},
        "doc_type": {"type": "string"},
        "outline": {"type": "string", "enum": ["definitions", "headings", "pages"]},
        "entries": {"type": "array", "items": {"$ref": "#/$defs/OutlineEntry"}},
        "count": {"type": "integer", "description": "Entries returned, at every level."},
        "total": {"type": "integer", "description": "Entries in the file's outline."},
        "lines": {"type": "integer"},
        "pages": {"type": "integer"},
        "truncated": {
            "type": "boolean",
            "description": "Entries were left out (max_entries), or the file is longer than an outline reads",
        },
        "from_index": {"type": "boolean"},
    },
    "required": ["rel_path", "doc_type", "outline", "entries", "count", "total", "truncated"],
    "$defs": {"Span": copy.deepcopy(SPAN), "OutlineEntry": OUTLINE_ENTRY},
}
