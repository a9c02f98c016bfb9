"""Schemas of the multimodal tools (spec §15.7–15.10), part of the contract like :mod:`schemas`."""

from __future__ import annotations

import copy

from kernel.jsontypes import JsonObject
from mcp_gateway.schemas import ASK_OUTPUT, K_INPUT, QUESTION, path_argument

_REL_PATH = path_argument("The file, relative to the root.")

TRANSCRIBE_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": _REL_PATH,
        "language": {
            "type": "string",
            "maxLength": 64,
            "description": "ISO language code hint, e.g. 'en'; detected if omitted.",
        },
        "timestamps": {"type": "boolean", "default": True},
        "retranscribe": {"type": "boolean", "default": False},
    },
    "required": ["rel_path"],
}

TRANSCRIBE_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": {"type": "string"},
        "provider": {"type": "string", "enum": ["mistral", "elevenlabs"]},
        "model": {"type": "string"},
        "indexed": {"type": "boolean"},
        "segments": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "start_ms": {"type": "integer"},
                    "end_ms": {"type": "integer"},
                    "text": {"type": "string"},
                },
                "required": ["start_ms", "end_ms", "text"],
            },
        },
    },
    "required": ["rel_path", "provider", "model", "indexed"],
}

ANNOTATE_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": _REL_PATH,
        "schema_json": {
            "type": "object",
            "description": "A JSON Schema (type: object) of the fields to extract.",
        },
        "index_flattened_text": {"type": "boolean", "default": True},
    },
    "required": ["rel_path", "schema_json"],
}

ANNOTATE_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": {"type": "string"},
        "stored": {"type": "boolean"},
        "flattened_indexed": {"type": "boolean"},
        "annotation_json": {"type": "object"},
        "annotation_text_preview": {"type": "string"},
    },
    "required": ["rel_path", "stored", "flattened_indexed", "annotation_json"],
}

TRANSCRIBE_AND_ASK_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rel_path": _REL_PATH,
        "question": QUESTION,
        "k": K_INPUT,
    },
    "required": ["rel_path", "question"],
}

TRANSCRIBE_AND_ASK_OUTPUT = copy.deepcopy(ASK_OUTPUT)
TRANSCRIBE_AND_ASK_OUTPUT["properties"] |= {
    "transcript_provider": {"type": "string"},
    "transcript_model": {"type": "string"},
    "transcribed": {"type": "boolean"},
}
TRANSCRIBE_AND_ASK_OUTPUT["required"] = [
    *ASK_OUTPUT["required"],
    "transcript_provider",
    "transcript_model",
    "transcribed",
]

ASK_AUDIO_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "question": QUESTION,
        "voice_id": {
            "type": "string",
            "maxLength": 256,
            "description": "An ElevenLabs voice id; the configured voice if omitted.",
        },
        "format": {"type": "string", "enum": ["mp3", "wav"], "default": "mp3"},
    },
    "required": ["question"],
}

ASK_AUDIO_OUTPUT = copy.deepcopy(ASK_OUTPUT)
ASK_AUDIO_OUTPUT["properties"] |= {
    "audio": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mimeType": {"type": "string"},
            "bytes": {"type": "integer"},
            "voice_id": {"type": "string"},
        },
        "required": ["mimeType", "bytes"],
    }
}
