"""Schemas of the navigation tools (issue #32), part of the contract like :mod:`schemas`."""

from __future__ import annotations

import copy

from corpus.navigation import names, symbols
from kernel.jsontypes import JsonObject
from mcp_gateway.schemas import SPAN, path_argument

MAX_ENTRIES = 5000

OUTLINE_INPUT: JsonObject = {
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

OUTLINE_ENTRY: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "kind": {
            "type": "string",
            "description": (
                "function, method, class, interface, struct, enum, type, module, macro, constant, …; "
                "macros or constants (a folded run); heading; page"
            ),
        },
        "name": {"type": "string"},
        "signature": {"type": "string", "description": "The definition's first line (a heading's title)."},
        "span": {"$ref": "#/$defs/Span"},
        "line": {
            "type": "integer",
            "description": "The signature's line, where the span starts above it (decorators, attributes).",
        },
        "folded": {
            "type": "integer",
            "minimum": 2,
            "description": (
                "A run of consecutive object-like C/C++ macros (kind macros) or enumerators (kind "
                "constants) shown as one entry: how many; name and signature are the first one's, "
                "span covers the run. dir2mcp.symbols finds each by name."
            ),
        },
        "last": {"type": "string", "description": "The name of a folded run's last definition."},
        "children": {"type": "array", "items": {"$ref": "#/$defs/OutlineEntry"}},
    },
    "required": ["kind", "name", "signature", "span"],
}

OUTLINE_OUTPUT: JsonObject = {
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

NAME: JsonObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": symbols.MAX_NAME,
    "description": "An identifier as written in the code, e.g. 'load_config' or 'Store'.",
}
PATH_PREFIX = path_argument("Only files under this relative directory, e.g. 'src/'.", required=False)

SYMBOLS_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": NAME,
        "kind": {
            "type": "string",
            "enum": list(names.KINDS),
            "description": "Only definitions of this kind.",
        },
        "path_prefix": PATH_PREFIX,
        "limit": {"type": "integer", "minimum": 1, "maximum": names.MAX_LIMIT, "default": 20},
    },
    "required": ["name"],
}

SYMBOLS_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "symbols": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "rel_path": {"type": "string"},
                    "name": {"type": "string"},
                    "qualified": {
                        "type": "string",
                        "description": "The name as declared, where it is qualified ('Foo::bar').",
                    },
                    "kind": {"type": "string"},
                    "span": {"$ref": "#/$defs/Span"},
                    "line": {"type": "integer", "description": "The line the name is on."},
                    "signature": {"type": "string", "description": "That line's text."},
                    "enclosing": {"type": "string", "description": "The enclosing definition's name."},
                    "match": {
                        "type": "string",
                        "enum": ["exact", "case_insensitive", "prefix", "substring", "generated"],
                    },
                },
                "required": ["rel_path", "name", "kind", "span", "line", "signature", "match"],
            },
        },
        "count": {"type": "integer"},
        "truncated": {"type": "boolean", "description": "More definitions matched than were returned."},
    },
    "required": ["name", "symbols", "count", "truncated"],
    "$defs": {"Span": copy.deepcopy(SPAN)},
}

REFERENCES_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": NAME,
        "path_prefix": PATH_PREFIX,
        "limit": {"type": "integer", "minimum": 1, "maximum": names.MAX_LIMIT, "default": 50},
        "cursor": {
            "type": "string",
            "maxLength": names.MAX_CURSOR,
            "description": "next_cursor from the previous page.",
        },
    },
    "required": ["name"],
}

REFERENCES_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "references": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "rel_path": {"type": "string"},
                    "span": {"$ref": "#/$defs/Span"},
                    "snippet": {"type": "string", "description": "The line's text."},
                    "enclosing": {"type": "string", "description": "The enclosing definition's name."},
                },
                "required": ["rel_path", "span", "snippet"],
            },
        },
        "count": {"type": "integer"},
        "next_cursor": {
            "type": "string",
            "description": "Pass as cursor for the next page; absent on the last.",
        },
    },
    "required": ["name", "references", "count"],
    "$defs": {"Span": copy.deepcopy(SPAN)},
}
