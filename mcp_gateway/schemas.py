"""The tools' JSON Schemas: spec §15, exactly, plus ``dir2mcp.find``.

JSON Schema 2020-12 (MCP's default dialect), shared types under ``$defs``.
These dictionaries are the contract: ``docs/contracts/tools.json`` is their
committed snapshot and ``SCHEMA_VERSION`` moves by the rules in
``docs/contracts.md``.
"""

from __future__ import annotations

import copy

from corpus import arguments, counters
from corpus.globs import MAX_GLOB_CHARS
from corpus.patterns import MAX_QUERY_CHARS, MAX_QUESTION_CHARS, MAX_REGEX_CHARS
from corpus.security import MAX_PATH_CHARS, MAX_PATH_SEGMENTS
from kernel.jsontypes import JsonObject
from mcp_gateway import budgets

SCHEMA_VERSION = "16.0.0"

#: ``doc_types`` filters at most (there are eleven types) and the length of each
MAX_DOC_TYPES = 16
MAX_DOC_TYPE_CHARS = 32
#: a find cursor holds a path (at most 4,096 characters), base64-encoded
MAX_FIND_CURSOR_CHARS = 8192
#: ``modified_after``: an ISO 8601 date or datetime
MAX_DATE_CHARS = 64

SPAN: JsonObject = {
    "type": "object",
    "oneOf": [
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kind": {"const": "lines"},
                "start_line": {"type": "integer"},
                "end_line": {"type": "integer"},
            },
            "required": ["kind", "start_line", "end_line"],
        },
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"kind": {"const": "page"}, "page": {"type": "integer"}},
            "required": ["kind", "page"],
        },
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kind": {"const": "time"},
                "start_ms": {"type": "integer"},
                "end_ms": {"type": "integer"},
            },
            "required": ["kind", "start_ms", "end_ms"],
        },
    ],
}

LABEL: JsonObject = {
    "type": "string",
    "description": 'A human pointer to the page, e.g. "slide 7" or "sheet \'Q2\'".',
}

HIT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "chunk_id": {"type": "integer"},
        "rel_path": {"type": "string"},
        "doc_type": {"type": "string"},
        "rep_type": {"type": "string"},
        "score": {"type": "number"},
        "snippet": {"type": "string"},
        "span": {"$ref": "#/$defs/Span"},
        # Where the span carries one (Office slides and sheets).
        "label": LABEL,
        # With search's max_tokens (issue #32): the passage itself.
        "content": {
            "type": "string",
            "description": "The cited text (search with max_tokens; snippet is then empty).",
        },
        "chunk_ids": {
            "type": "array",
            "items": {"type": "integer"},
            "description": "The hits merged into this passage (search with max_tokens).",
        },
        "tokens": {"type": "integer", "description": "Estimated tokens of the passage (with max_tokens)."},
        "truncated": {
            "type": "boolean",
            "description": "The passage alone was over max_tokens: its first lines (open_file reads on).",
        },
    },
    "required": ["chunk_id", "rel_path", "score", "snippet", "span"],
}


# An addition to §15.1/§15.2 (docs/contracts.md, 3.0.0): whether dense
# retrieval took part, and why not when it failed.
def _provider_status(description: str) -> JsonObject:
    """Whether a provider call took part, and if not why: ``dense`` and ``generation``."""
    return {
        "type": "object",
        "additionalProperties": False,
        "description": description,
        "properties": {
            "status": {"type": "string", "enum": ["ok", "off", "unavailable"]},
            "code": {"type": "string", "description": "The error code (spec §14), when unavailable."},
            "message": {"type": "string", "description": "What failed, when unavailable."},
        },
        "required": ["status"],
    }


DENSE = _provider_status(
    "Whether semantic (dense) search took part: ok; off (no embedder configured); unavailable "
    "(embedding the query failed: code and message say why, and the results are lexical only); "
    "waiting (the dense indices of kinds wait for the file the indexing process is building: their "
    "results are lexical only, the other's dense ranking took part)."
)
# An addition (15.0.0): a server following its indexing child's saves with
# no usable dense index of a kind waits for the child's file.
DENSE["properties"] |= {
    "status": {"type": "string", "enum": ["ok", "off", "unavailable", "waiting"]},
    "kinds": {
        "type": "array",
        "items": {"type": "string", "enum": ["text", "code"]},
        "description": "The dense indices waiting for the indexing process's file (waiting).",
    },
    "message": {"type": "string", "description": "What failed (unavailable), or what waits (waiting)."},
}

# An addition to §15.2 (docs/contracts.md, 4.0.0, 5.0.0): whether the chat
# model wrote the answer, in the shape of ``dense``, and why not
# (corpus/answer.py).
GENERATION = _provider_status(
    "Whether a chat model wrote the answer: ok (model names it); off (reason and message say why "
    "not: search_only asked for, no chat model configured, rag.generate_answer false, or nothing "
    "retrieved); unavailable (the chat call failed: code and message say why, and the answer "
    "lists the top matches instead)."
)
GENERATION["properties"] |= {
    "reason": {
        "type": "string",
        "enum": ["search_only", "no_chat_model", "generate_answer_off", "no_hits", "chat_failed"],
        "description": "Why no chat model wrote the answer (off and unavailable).",
    },
    "model": {
        "type": "string",
        "description": "The chat model (provider/model) that wrote the answer, or that failed.",
    },
}


# An addition to §15.1/§15.2 (docs/contracts.md, 3.0.0): whether anything
# matched the query well (corpus/ranking.py: is_weak).
MATCH: JsonObject = {
    "type": "string",
    "enum": ["good", "weak"],
    "description": (
        "weak: no unit holds every query term and the nearest unit is not similar enough (without "
        "dense search: nothing matched); the hits are the nearest there are, not answers."
    ),
}


#: The question of ask and of the multimodal tools that answer one.
QUESTION: JsonObject = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_QUESTION_CHARS,
    "description": "The question, in natural language.",
}


#: At most MAX_PATH_SEGMENTS segments: a path with fewer than that many slashes.
PATH_SEGMENTS_PATTERN = f"^(?:[^/]*/){{0,{MAX_PATH_SEGMENTS - 1}}}[^/]*$"


def path_argument(description: str, *, required: bool = True) -> JsonObject:
    """Every path-bearing argument: at most ``MAX_PATH_CHARS`` characters in
    at most ``MAX_PATH_SEGMENTS`` segments (corpus/security.py enforces the
    same bounds behind every surface, schema or not)."""
    bounds = {"minLength": 1} if required else {}
    return {
        "type": "string",
        **bounds,
        "maxLength": MAX_PATH_CHARS,
        "pattern": PATH_SEGMENTS_PATTERN,
        "description": description,
    }


def _with_defs(schema: JsonObject, *names: str) -> JsonObject:
    defs = {"Span": SPAN, "Hit": HIT}
    out = copy.deepcopy(schema)
    out["$defs"] = {name: copy.deepcopy(defs[name]) for name in names}
    return out


_INDEX: JsonObject = {"type": "string", "enum": ["auto", "text", "code", "both"], "default": "auto"}
K_INPUT: JsonObject = {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}
_FILTERS: JsonObject = {
    "path_prefix": path_argument("Only files under this relative directory, e.g. 'src/'.", required=False),
    "file_glob": {
        "type": "string",
        "maxLength": MAX_GLOB_CHARS,
        "description": "Only files matching this glob, e.g. '*.py' or 'docs/**/*.md'.",
    },
    "doc_types": {
        "type": "array",
        "maxItems": MAX_DOC_TYPES,
        "items": {"type": "string", "maxLength": MAX_DOC_TYPE_CHARS},
        "description": "Only these document types: code, md, text, data, html, pdf, image, audio, archive.",
    },
}

SEARCH_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "query": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_QUERY_CHARS,
            "description": "What to look for, in words or identifiers.",
        },
        "k": K_INPUT,
        "index": _INDEX,
        **_FILTERS,
        "max_tokens": budgets.argument(
            "the result",
            "With it, search returns the cited text itself: as many hits as fit, in rank order, "
            "hits of one file whose lines overlap or touch merged into one passage.",
        ),
    },
    "required": ["query"],
}

SEARCH_OUTPUT = _with_defs(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string"},
            "k": {"type": "integer"},
            "index_used": {"type": "string", "enum": ["text", "code", "both"]},
            "hits": {"type": "array", "items": {"$ref": "#/$defs/Hit"}},
            "indexing_complete": {"type": "boolean"},
            "dense": DENSE,
            "match": MATCH,
            "budget": budgets.OUTPUT,
            "next_cursor": budgets.NEXT_CURSOR,
        },
        "required": ["query", "hits", "indexing_complete"],
    },
    "Span",
    "Hit",
)

ASK_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "question": QUESTION,
        "k": K_INPUT,
        "mode": {"type": "string", "enum": ["answer", "search_only"], "default": "answer"},
        "index": _INDEX,
        **_FILTERS,
    },
    "required": ["question"],
}

ERROR: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "code": {"type": "string"},
        "message": {"type": "string"},
        "retryable": {"type": "boolean"},
    },
    "required": ["code", "message", "retryable"],
}

# dir2mcp.verify's result, and ask's check of its own answer (issue #32).
VERIFICATION: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "citations": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "citation": {"type": "string"},
                    "rel_path": {"type": "string"},
                    "exists": {"type": "boolean", "description": "The file is there and may be read."},
                    "in_bounds": {
                        "type": "boolean",
                        "description": "The cited lines, page or time range are in it.",
                    },
                    "quotes": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"text": {"type": "string"}, "found": {"type": "boolean"}},
                            "required": ["text", "found"],
                        },
                        "description": "Each quotation made right before the citation; found in the slice?",
                    },
                    "ok": {"type": "boolean"},
                    "error": ERROR,
                },
                "required": ["citation", "exists", "in_bounds", "quotes", "ok"],
            },
        },
        "checked": {"type": "integer"},
        "unchecked": {"type": "integer", "description": "Citations past the 50 that are checked."},
        "ok": {"type": "integer"},
        "all_ok": {"type": "boolean"},
    },
    "required": ["citations", "checked", "unchecked", "ok", "all_ok"],
}

ASK_OUTPUT = _with_defs(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "question": {"type": "string"},
            "answer": {"type": "string"},
            "citations": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "chunk_id": {"type": "integer"},
                        "rel_path": {"type": "string"},
                        "span": {"$ref": "#/$defs/Span"},
                        "label": LABEL,
                    },
                    "required": ["chunk_id", "rel_path", "span"],
                },
            },
            "hits": {"type": "array", "items": {"$ref": "#/$defs/Hit"}},
            "indexing_complete": {"type": "boolean"},
            "dense": DENSE,
            "match": MATCH,
            # An addition to §15.2 (docs/contracts.md, 5.0.0).
            "mode": {
                "type": "string",
                "enum": ["answer", "search_only"],
                "description": (
                    "The mode that answered: answer (a chat model wrote it) or search_only (the top "
                    "matches are listed; generation says why)."
                ),
            },
            "generation": GENERATION,
            # An addition (issue #32, 7.0.0): the generated answer's citations checked.
            "verification": {
                **VERIFICATION,
                "description": (
                    "When a chat model wrote the answer: each of its citations checked against the "
                    "files (dir2mcp.verify)."
                ),
            },
        },
        "required": ["question", "citations", "hits", "indexing_complete"],
    },
    "Span",
    "Hit",
)

OPEN_FILE_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        # Mirrored as the Mcp-Param-Path header by 2026-07-28 clients over HTTP
        # (a gateway may route or audit by it; mcp_gateway/mirrored.py checks it).
        "rel_path": {**path_argument("Path relative to the root, as in a hit."), "x-mcp-header": "Path"},
        "start_line": arguments.LINE.schema(),
        "end_line": arguments.LINE.schema(),
        "page": arguments.PAGE.schema(),
        "start_ms": arguments.MILLISECOND.schema(),
        "end_ms": arguments.MILLISECOND.schema(),
        "max_chars": arguments.MAX_CHARS.schema(),
    },
    "required": ["rel_path"],
}

OPEN_FILE_OUTPUT = _with_defs(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "rel_path": {"type": "string"},
            "doc_type": {"type": "string"},
            "span": {"$ref": "#/$defs/Span"},
            "content": {"type": "string"},
            "truncated": {"type": "boolean"},
            # An addition to §15.4 (issue #24, 5.0.0): present and true when the
            # file changed during every read, and content is its indexed text.
            "from_index": {
                "type": "boolean",
                "description": (
                    "True when the file kept changing while it was read: content is the text "
                    "indexed last (what search cited), not the file as it is now."
                ),
            },
        },
        "required": ["rel_path", "doc_type", "content", "truncated"],
    },
    "Span",
)

LIST_FILES_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "path_prefix": _FILTERS["path_prefix"],
        "glob": {"type": "string", "maxLength": MAX_GLOB_CHARS},
        "limit": arguments.LIST_LIMIT.schema(),
        "offset": arguments.OFFSET.schema(),
        "cursor": {
            "type": "string",
            "maxLength": MAX_FIND_CURSOR_CHARS,
            "description": (
                "next_cursor from the previous page, with the same path_prefix and glob (and no offset): "
                "the page after the last file that page returned, or, after a page its time budget cut "
                "(timed_out), where it stopped."
            ),
        },
    },
}

LIST_FILES_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "limit": {"type": "integer"},
        "offset": {"type": "integer"},
        "total": {
            "type": "integer",
            "description": (
                "The files matching that the exclusion rules let through now; absent when more than a "
                "page and 500 more match (or the rules changed since the index was written and over "
                "1,000 matches they now exclude are still in it), and on a page reached by cursor: "
                "has_more then says whether more follow."
            ),
        },
        "has_more": {
            "type": "boolean",
            "description": "More files follow: pass next_cursor (or offset + the files' count).",
        },
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "rel_path": {"type": "string"},
                    "doc_type": {"type": "string"},
                    "size_bytes": {"type": "integer"},
                    "mtime_unix": {"type": "integer"},
                    "status": {"type": "string", "enum": ["ok", "skipped", "error"]},
                    # An addition (5.0.0): the spec §14 code of a file in error, where stored.
                    "error_code": {"type": "string"},
                    "deleted": {"type": "boolean"},
                },
                "required": ["rel_path", "doc_type", "size_bytes", "mtime_unix", "status", "deleted"],
            },
        },
        # An addition (16.0.0): a glob listing stops at find's time budget.
        "timed_out": {
            "type": "boolean",
            "description": (
                "With a glob, judging the paths took the time budget (DIR2MCP_FIND_BUDGET_SECONDS, as "
                "find) before the page filled: the files found so far, has_more, and next_cursor to go on."
            ),
        },
    },
    "required": ["limit", "offset", "has_more", "files"],
}

STATS_INPUT: JsonObject = {"type": "object", "additionalProperties": False}

# One embedder: a provider and its model per index kind; null when there is none.
EMBEDDER_MODELS: JsonObject = {
    "type": ["object", "null"],
    "additionalProperties": False,
    "properties": {
        "provider": {"type": "string"},
        "text_model": {"type": "string"},
        "code_model": {"type": "string"},
    },
    "required": ["provider", "text_model", "code_model"],
}

_COUNTER: JsonObject = {"type": "integer"}
#: Counts by name.
COUNTS: JsonObject = {"type": "object", "additionalProperties": {"type": "integer"}}

STATS_OUTPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "root": {"type": "string"},
        "state_dir": {"type": "string"},
        "protocol_version": {"type": "string"},
        # An addition to §15.6: the tool contract's version (docs/contracts.md).
        "schema_version": {"type": "string"},
        "indexing": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "job_id": {"type": "string"},
                "running": {"type": "boolean"},
                "mode": {"type": "string", "enum": ["incremental", "full"]},
                # corpus/counters.py; unchanged is an addition to §15.6 (docs/contracts.md,
                # 5.0.0): what an incremental pass found unchanged, where skipped is what a
                # policy left out.
                **{name: _COUNTER for name in counters.NAMES},
            },
            "required": ["job_id", "running", "mode", *counters.NAMES],
        },
        "models": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "embed_text": {"type": "string"},
                "embed_code": {"type": "string"},
                "ocr": {"type": "string"},
                "stt_provider": {"type": "string", "enum": ["mistral", "elevenlabs"]},
                "stt_model": {"type": "string"},
                "chat": {"type": "string"},
            },
            "required": ["embed_text", "embed_code", "ocr", "stt_provider", "stt_model", "chat"],
        },
        # An addition to §15.6 (issue #17): where the indexer runs, whether it
        # is alive, its restarts, and dense coverage with the time to full.
        "indexer": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "mode": {"type": "string", "enum": ["process", "thread", "none"]},
                "running": {"type": "boolean"},
                "pid": {"type": ["integer", "null"]},
                "restarts": {"type": "integer"},
                "last_exit": {"type": ["object", "null"]},
                # Changes the store refused to write (a full disk), retried
                # until they land; null when none wait (docs/reliability.md).
                "unwritten": {
                    "type": ["object", "null"],
                    "additionalProperties": False,
                    "properties": {
                        "paths": {"type": "integer"},
                        "walk": {"type": "boolean"},
                        "code": {"type": "string"},
                        "message": {"type": "string"},
                    },
                    "required": ["paths", "walk", "code", "message"],
                },
                "dense": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "embedded": {"type": "integer"},
                        "total": {"type": "integer"},
                        "rate_per_second": {"type": ["number", "null"]},
                        "views_waiting": {
                            "type": "integer",
                            "description": (
                                "Signature views of code units still to embed (views later: each unit's "
                                "own vector comes first); eta_seconds counts them."
                            ),
                        },
                        "views_rate_per_second": {"type": ["number", "null"]},
                        "eta_seconds": {"type": ["number", "null"]},
                        # An addition (15.0.0).
                        "waiting_for_file": {
                            "type": "array",
                            "items": {"type": "string", "enum": ["text", "code"]},
                            "description": (
                                "The dense indices this server has no usable file of and waits for the "
                                "indexing process to build and save (searching them is lexical only "
                                "meanwhile); empty otherwise."
                            ),
                        },
                    },
                    "required": [
                        "embedded",
                        "total",
                        "rate_per_second",
                        "views_waiting",
                        "views_rate_per_second",
                        "eta_seconds",
                        "waiting_for_file",
                    ],
                },
            },
            "required": ["mode", "running", "pid", "restarts", "last_exit", "dense"],
        },
        # Additions to §15.6 (docs/contracts.md, 3.0.0).
        "documents_on_older_format": {
            "type": "integer",
            "description": (
                "Live documents whose units an older format cut: they serve until the running pass "
                "(or the next `up` / `reindex --incremental`) re-cuts them."
            ),
        },
        "embedder": {
            "type": "object",
            "additionalProperties": False,
            "description": (
                "The embedder the index was built with (recorded), the configured one, and the one this "
                "server uses (active). When they differ the recorded one is kept, so vectors never mix "
                "(kept), or, when it cannot be used here, search is lexical only (unavailable); note says "
                "how to switch (`dir2mcp reindex`)."
            ),
            "properties": {
                "recorded": EMBEDDER_MODELS,
                "configured": EMBEDDER_MODELS,
                "active": EMBEDDER_MODELS,
                "status": {"type": "string", "enum": ["ok", "kept", "unavailable", "off", "mismatch"]},
                "note": {"type": "string"},
            },
            "required": ["recorded", "configured", "active", "status", "note"],
        },
        "signature_weight": {
            "type": "object",
            "additionalProperties": False,
            "description": (
                "How much the index's code vectors lean towards each unit's signature view "
                "(recorded; null before any vector) against embed.signature_weight (configured); "
                "note says how to apply a changed weight (`dir2mcp reindex`)."
            ),
            "properties": {
                "recorded": {"type": ["number", "null"]},
                "configured": {"type": "number"},
                "note": {"type": "string"},
            },
            "required": ["recorded", "configured", "note"],
        },
        # An addition to §15.6 (issue #37, docs/contracts.md).
        "coverage": {
            "type": ["object", "null"],
            "additionalProperties": False,
            "description": (
                "What the last whole walk covered: the files it found, those indexed, the files git tracks "
                "below the root (null outside a git work tree), what it left out by kind (gitignore, "
                "default_ignore, path_excludes, secret_name, state_dir, symlink: files and directories, "
                "a directory counted once) and by exact reason, and what was skipped after reading "
                "(size_cap, binary, secret ...). warning is non-empty, and loud, when the index holds 0 "
                "files or far more than git tracks. Null before a whole walk has finished."
            ),
            "properties": {
                "walked_files": {"type": "integer"},
                "indexed_files": {"type": "integer"},
                "git_tracked_files": {"type": ["integer", "null"]},
                "excluded": {
                    "type": "object",
                    "additionalProperties": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"files": {"type": "integer"}, "dirs": {"type": "integer"}},
                        "required": ["files", "dirs"],
                    },
                },
                "excluded_reasons": COUNTS,
                "skipped": COUNTS,
                "warning": {"type": "string"},
                "recorded_unix": {"type": "number"},
            },
            "required": [
                "walked_files",
                "indexed_files",
                "git_tracked_files",
                "excluded",
                "excluded_reasons",
                "skipped",
                "warning",
                "recorded_unix",
            ],
        },
        # An addition to §15.6 (issue #37, docs/contracts.md 10.0.0).
        "pending_changes": {
            "type": "integer",
            "description": (
                "Changed paths live sync has seen and not yet indexed, of those the exclusion policy "
                "would index: the count every answer's freshness.pending_changes carries."
            ),
        },
    },
    "required": ["root", "state_dir", "protocol_version", "indexing", "models"],
}

FIND_INPUT: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name_glob": {
            "type": "string",
            "maxLength": MAX_GLOB_CHARS,
            "description": "File name or path glob, e.g. '*.md' or 'src/**/test_*.py'.",
        },
        "content": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_REGEX_CHARS,
            "description": "Text to find in the extracted text (OCR and transcripts included).",
        },
        "regex": {
            "type": "boolean",
            "default": False,
            "description": "Treat content as a regular expression.",
        },
        "case_sensitive": {"type": "boolean", "default": False},
        "doc_types": _FILTERS["doc_types"],
        "path_prefix": _FILTERS["path_prefix"],
        "modified_after": {
            "type": ["string", "integer"],
            "maxLength": MAX_DATE_CHARS,
            "description": "ISO 8601 date or datetime, or Unix seconds.",
        },
        "limit": arguments.FIND_LIMIT.schema(),
        "cursor": {
            "type": "string",
            "maxLength": MAX_FIND_CURSOR_CHARS,
            "description": "next_cursor from the previous page.",
        },
    },
}

FIND_OUTPUT = _with_defs(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "matches": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "rel_path": {"type": "string"},
                        "doc_type": {"type": "string"},
                        "mtime_unix": {"type": "integer"},
                        "size_bytes": {"type": "integer"},
                        "rep_type": {"type": "string"},
                        "span": {"$ref": "#/$defs/Span"},
                        "snippet": {"type": "string"},
                    },
                    "required": ["rel_path", "doc_type", "mtime_unix", "size_bytes"],
                },
            },
            "files_scanned": {"type": "integer"},
            "next_cursor": {"type": "string"},
            "timed_out": {"type": "boolean"},
        },
        "required": ["matches", "files_scanned", "timed_out"],
    },
    "Span",
)
