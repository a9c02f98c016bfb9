"""Schemas of the read utilities (issue #32, seed 002), part of the contract like :mod:`schemas`."""

from __future__ import annotations

import copy

from corpus.navigation.reads import ALGORITHMS
from mcp_gateway.schemas import ERROR, OPEN_FILE_INPUT, OPEN_FILE_OUTPUT, SPAN, VERIFICATION, path_argument

_REL_PATH = path_argument("The file, relative to the root.")
_ERROR = ERROR
MAX_SLICES = 20

CHECKSUM_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": _REL_PATH,
        "algorithm": {"type": "string", "enum": list(ALGORITHMS), "default": "sha256"},
    },
    "required": ["rel_path"],
}

CHECKSUM_OUTPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": {"type": "string"},
        "algorithm": {"type": "string"},
        "digest": {"type": "string", "description": "Lower-case hex."},
        "size_bytes": {"type": "integer"},
    },
    "required": ["rel_path", "algorithm", "digest", "size_bytes"],
}

DIFF_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path_a": _REL_PATH,
        "rel_path_b": _REL_PATH,
        "context": {"type": "integer", "minimum": 0, "maximum": 20, "default": 3},
        "max_chars": {"type": "integer", "minimum": 200, "maximum": 50000, "default": 20000},
    },
    "required": ["rel_path_a", "rel_path_b"],
}

DIFF_OUTPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path_a": {"type": "string"},
        "rel_path_b": {"type": "string"},
        "identical": {"type": "boolean"},
        "added": {"type": "integer", "description": "Lines only in b."},
        "removed": {"type": "integer", "description": "Lines only in a."},
        "diff": {"type": "string", "description": "Unified diff (a, then b)."},
        "truncated": {"type": "boolean"},
    },
    "required": ["rel_path_a", "rel_path_b", "identical", "added", "removed", "diff", "truncated"],
}

_SLICE = copy.deepcopy(OPEN_FILE_INPUT)
_SLICE["properties"].pop("max_chars")
_SLICE["properties"]["rel_path"].pop("x-mcp-header")  # only on a top-level argument (never under items)
OPEN_FILES_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "slices": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_SLICES,
            "items": _SLICE,
            "description": "Each as dir2mcp.open_file takes it: rel_path and lines, a page or a time range.",
        },
        "max_chars": {
            "type": "integer",
            "minimum": 200,
            "maximum": 50000,
            "default": 20000,
            "description": "For all slices together, shared equally (at least 200 each).",
        },
    },
    "required": ["slices"],
}

_OPENED = copy.deepcopy(OPEN_FILE_OUTPUT)
_OPENED.pop("$defs")
OPEN_FILES_OUTPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "slices": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {"result": _OPENED, "error": {"$ref": "#/$defs/Error"}},
                "description": "In the order asked: the slice (result), or why it was refused (error).",
            },
        },
        "truncated": {"type": "boolean", "description": "Some slice was cut at its share of max_chars."},
    },
    "required": ["slices", "truncated"],
    "$defs": {"Span": copy.deepcopy(SPAN), "Error": _ERROR},
}

VERIFY_INPUT = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "text": {
            "type": "string",
            "minLength": 1,
            "maxLength": 100_000,
            "description": "Text with citations ([path:L1-L9], [doc.pdf#p=3], [talk.wav@t=01:05-01:35]).",
        },
    },
    "required": ["text"],
}

VERIFY_OUTPUT = VERIFICATION
