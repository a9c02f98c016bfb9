"""Schemas of the read utilities (issue #32, seed 002), part of the contract like :mod:`schemas`."""

from __future__ import annotations

import copy

from corpus import arguments
from corpus.navigation import images
from corpus.navigation.reads import ALGORITHMS, DEFAULT_LENGTH, FORMATS, MAX_LENGTH
from kernel.jsontypes import JsonObject
from mcp_gateway.schemas import ERROR, OPEN_FILE_INPUT, OPEN_FILE_OUTPUT, SPAN, VERIFICATION, path_argument

_REL_PATH = path_argument("The file, relative to the root.")
_ERROR = ERROR
MAX_SLICES = 20

CHECKSUM_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": _REL_PATH,
        "algorithm": {"type": "string", "enum": list(ALGORITHMS), "default": "sha256"},
    },
    "required": ["rel_path"],
}

CHECKSUM_OUTPUT: JsonObject = {
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

DIFF_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path_a": _REL_PATH,
        "rel_path_b": _REL_PATH,
        "context": {"type": "integer", "minimum": 0, "maximum": 20, "default": 3},
        "max_chars": arguments.MAX_CHARS.schema(),
    },
    "required": ["rel_path_a", "rel_path_b"],
}

DIFF_OUTPUT: JsonObject = {
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

_SLICE: JsonObject = copy.deepcopy(OPEN_FILE_INPUT)
_SLICE["properties"].pop("max_chars")
_SLICE["properties"]["rel_path"].pop("x-mcp-header")  # only on a top-level argument (never under items)
OPEN_FILES_INPUT: JsonObject = {
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
            **arguments.MAX_CHARS.schema(),
            "description": "For all slices together, shared equally (at least 200 each).",
        },
    },
    "required": ["slices"],
}

_OPENED = copy.deepcopy(OPEN_FILE_OUTPUT)
_OPENED.pop("$defs")
OPEN_FILES_OUTPUT: JsonObject = {
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

VERIFY_INPUT: JsonObject = {
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

READ_BYTES_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": _REL_PATH,
        "offset": {
            "type": "integer",
            "minimum": 0,
            "maximum": 2**53 - 1,
            "description": "The first byte (default 0). Past the end: no content, eof true.",
        },
        "length": {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_LENGTH,
            "description": f"How many bytes (default {DEFAULT_LENGTH}, at most {MAX_LENGTH}).",
        },
        "format": {
            "type": "string",
            "enum": list(FORMATS),
            "default": "auto",
            "description": (
                "text: UTF-8, the range moved to whole characters (a file that is not text is "
                "DOC_TYPE_UNSUPPORTED); base64: the raw bytes; image: an image file whole as MCP image "
                "content (no offset or length), scaled down to fit "
                f"{images.MAX_IMAGE_BYTES} bytes; auto: image for an image file when no offset or length "
                "is given, text for a text file, base64 otherwise."
            ),
        },
    },
    "required": ["rel_path"],
}

READ_BYTES_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": {"type": "string"},
        "format": {"type": "string", "enum": ["text", "base64", "image"], "description": "As returned."},
        "offset": {"type": "integer", "description": "The first byte returned (text: a character's start)."},
        "length": {"type": "integer", "description": "The bytes returned (of the file, for an image)."},
        "size_bytes": {"type": "integer", "description": "The file's size."},
        "eof": {"type": "boolean", "description": "The range reaches the end of the file."},
        "next_offset": {"type": "integer", "description": "offset + length: where the next range starts."},
        "mime_type": {"type": "string", "description": "The file's (of the returned data, for an image)."},
        "content": {"type": "string", "description": "The text, or the bytes in base64 (not for an image)."},
        "lossy": {"type": "boolean", "description": "text: bytes that are not UTF-8 became U+FFFD."},
        "image": {
            "type": "object",
            "additionalProperties": False,
            "description": "format image: the image content item's data, and the file's image it came from.",
            "properties": {
                "width": {"type": "integer"},
                "height": {"type": "integer"},
                "data_bytes": {"type": "integer", "description": "The image data's size (before base64)."},
                "downscaled": {"type": "boolean", "description": "Fewer pixels than the file's image."},
                "recompressed": {"type": "boolean", "description": "Encoded again (scaled, or TIFF/BMP)."},
                "source_mime_type": {"type": "string"},
                "source_width": {"type": "integer"},
                "source_height": {"type": "integer"},
            },
            "required": [
                "width",
                "height",
                "data_bytes",
                "downscaled",
                "recompressed",
                "source_mime_type",
                "source_width",
                "source_height",
            ],
        },
        "data": {
            "type": "string",
            "description": "REST only, format image: the image in base64 (over MCP: the image content item).",
        },
    },
    "required": ["rel_path", "format", "offset", "length", "size_bytes", "eof", "next_offset", "mime_type"],
}
