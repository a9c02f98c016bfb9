"""Every error code, and the shapes errors travel in.

- the canonical codes (spec §14) and the process exit codes (spec §2.4);
- the JSON-RPC codes the MCP surfaces answer with (``RPC_*``);
- the HTTP status of each code (:func:`http_status`);
- the envelopes: a JSON-RPC error (:func:`rpc_error`, :func:`rpc_refusal`)
  and the REST mirror's error body (:func:`rest_error_body`).

It lives in the kernel because every app raises these codes: the ingest
pipeline stores them, the gateway answers with them, payments refuses with
them. Every layer raises
:class:`Dir2mcpError` with one of them; the CLI maps it to an exit code, the
MCP gateway to a tool error and the REST mirror to a status, so a code means
the same thing everywhere.
"""

from __future__ import annotations

from kernel.jsontypes import JsonObject

# Exit codes (spec §2.4)
EXIT_OK = 0
EXIT_GENERIC = 1
EXIT_CONFIG = 2
EXIT_ROOT = 3
EXIT_BIND = 4
EXIT_INDEX = 5
EXIT_INGEST = 6

# Auth / transport
UNAUTHORIZED = "UNAUTHORIZED"
FORBIDDEN_ORIGIN = "FORBIDDEN_ORIGIN"
SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
RATE_LIMITED = "RATE_LIMITED"
# Not in §14: every tool-call slot of the process is taken (JSON-RPC -32001).
SERVER_BUSY = "SERVER_BUSY"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"  # a call ran past server.call_timeout
BIND_FAILED = "BIND_FAILED"
TLS_CONFIG_INVALID = "TLS_CONFIG_INVALID"
# Input validation
MISSING_FIELD = "MISSING_FIELD"
INVALID_FIELD = "INVALID_FIELD"
INVALID_RANGE = "INVALID_RANGE"
FORBIDDEN = "FORBIDDEN"
PATH_OUTSIDE_ROOT = "PATH_OUTSIDE_ROOT"
FILE_NOT_FOUND = "FILE_NOT_FOUND"
DOC_TYPE_UNSUPPORTED = "DOC_TYPE_UNSUPPORTED"
# Index / state
CONFIG_INVALID = "CONFIG_INVALID"
# Not in §14: the root's own .dir2mcp.yaml sets keys that need the operator's
# approval (`dir2mcp config trust`; kernel/config.py, KEY_TRUST).
CONFIG_UNTRUSTED = "CONFIG_UNTRUSTED"
STORE_CORRUPT = "STORE_CORRUPT"
INDEX_VERSION_MISMATCH = "INDEX_VERSION_MISMATCH"
INDEX_NOT_READY = "INDEX_NOT_READY"
INDEX_LOCKED = "INDEX_LOCKED"
STATE_NOT_WRITABLE = "STATE_NOT_WRITABLE"
ROOT_INACCESSIBLE = "ROOT_INACCESSIBLE"
# Ingestion / extraction
EXTRACT_FAILED = "EXTRACT_FAILED"
OCR_FAILED = "OCR_FAILED"
TRANSCRIBE_FAILED = "TRANSCRIBE_FAILED"
ANNOTATE_FAILED = "ANNOTATE_FAILED"
FILE_TOO_LARGE = "FILE_TOO_LARGE"
BINARY_SKIPPED = "BINARY_SKIPPED"
ARCHIVE_REJECTED = "ARCHIVE_REJECTED"
SECRET_DETECTED = "SECRET_DETECTED"
# Providers
MISTRAL_AUTH = "MISTRAL_AUTH"
MISTRAL_RATE_LIMIT = "MISTRAL_RATE_LIMIT"
MISTRAL_FAILED = "MISTRAL_FAILED"
ELEVENLABS_AUTH = "ELEVENLABS_AUTH"
ELEVENLABS_RATE_LIMIT = "ELEVENLABS_RATE_LIMIT"
ELEVENLABS_FAILED = "ELEVENLABS_FAILED"
# Other providers (openai-compatible servers)
PROVIDER_AUTH = "PROVIDER_AUTH"
PROVIDER_RATE_LIMIT = "PROVIDER_RATE_LIMIT"
PROVIDER_FAILED = "PROVIDER_FAILED"
# Not in §14: a bug (logged; never a traceback on the wire), and the REST
# mirror's unknown route and method.
INTERNAL_ERROR = "INTERNAL_ERROR"
NOT_FOUND = "NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"

# JSON-RPC error codes (JSON-RPC 2.0, MCP); the §14 code rides in ``error.data.code``.
RPC_PARSE_ERROR = -32700
RPC_INVALID_REQUEST = -32600
RPC_METHOD_NOT_FOUND = -32601
RPC_INVALID_PARAMS = -32602
RPC_INTERNAL_ERROR = -32603
RPC_SERVER_BUSY = -32001  # every tool-call slot of the process is taken
RPC_RESOURCE_NOT_FOUND = -32002  # MCP resources/read of nothing we serve
RPC_PAYMENT_UNAVAILABLE = -32003  # x402: the facilitator cannot be reached, or a payment is in flight
RPC_REQUEST_CANCELLED = -32800

_EXIT_FOR_CODE = {
    CONFIG_INVALID: EXIT_CONFIG,
    CONFIG_UNTRUSTED: EXIT_CONFIG,
    ROOT_INACCESSIBLE: EXIT_ROOT,
    BIND_FAILED: EXIT_BIND,
    TLS_CONFIG_INVALID: EXIT_CONFIG,
    STORE_CORRUPT: EXIT_INDEX,
    INDEX_VERSION_MISMATCH: EXIT_INDEX,
    INDEX_NOT_READY: EXIT_INDEX,
    STATE_NOT_WRITABLE: EXIT_INGEST,
}

_RETRYABLE = {
    RATE_LIMITED,
    SERVER_BUSY,
    DEADLINE_EXCEEDED,
    MISTRAL_RATE_LIMIT,
    ELEVENLABS_RATE_LIMIT,
    PROVIDER_RATE_LIMIT,
    INDEX_NOT_READY,
    INDEX_LOCKED,
}


_HTTP_STATUS = {
    **dict.fromkeys((MISSING_FIELD, INVALID_FIELD, INVALID_RANGE, DOC_TYPE_UNSUPPORTED), 400),
    SESSION_NOT_FOUND: 400,
    UNAUTHORIZED: 401,
    **dict.fromkeys((FORBIDDEN, FORBIDDEN_ORIGIN, PATH_OUTSIDE_ROOT, SECRET_DETECTED), 403),
    **dict.fromkeys((FILE_NOT_FOUND, NOT_FOUND), 404),
    METHOD_NOT_ALLOWED: 405,
    # The request is well formed but the file it names cannot be served.
    **dict.fromkeys((FILE_TOO_LARGE, BINARY_SKIPPED, ARCHIVE_REJECTED, EXTRACT_FAILED), 422),
    **dict.fromkeys((RATE_LIMITED, MISTRAL_RATE_LIMIT, ELEVENLABS_RATE_LIMIT, PROVIDER_RATE_LIMIT), 429),
    **dict.fromkeys(
        (MISTRAL_AUTH, MISTRAL_FAILED, ELEVENLABS_AUTH, ELEVENLABS_FAILED, PROVIDER_AUTH, PROVIDER_FAILED)
        + (OCR_FAILED, TRANSCRIBE_FAILED, ANNOTATE_FAILED),
        502,
    ),
    **dict.fromkeys(
        (
            INDEX_NOT_READY,
            INDEX_LOCKED,
            INDEX_VERSION_MISMATCH,
            STORE_CORRUPT,
            CONFIG_INVALID,
            CONFIG_UNTRUSTED,
        )
        + (STATE_NOT_WRITABLE, ROOT_INACCESSIBLE, SERVER_BUSY, DEADLINE_EXCEEDED),
        503,
    ),
}


def http_status(code: str) -> int:
    """The HTTP status of a code; 500 for anything unknown (``INTERNAL_ERROR``)."""
    return _HTTP_STATUS.get(code, 500)


class Dir2mcpError(Exception):
    """An error with a canonical code and a message safe to show a user."""

    def __init__(self, code: str, message: str, *, hint: str = "", retryable: bool | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.retryable = code in _RETRYABLE if retryable is None else retryable

    @property
    def exit_code(self) -> int:
        return _EXIT_FOR_CODE.get(self.code, EXIT_GENERIC)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def as_dict(self) -> JsonObject:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}


# -- envelopes ----------------------------------------------------------------


def _rpc_body(code: int, message: str, data: JsonObject | None) -> JsonObject:
    body: JsonObject = {"code": code, "message": message}
    if data is not None:
        body["data"] = data
    return body


def rpc_error(msg_id: object, code: int, message: str, data: JsonObject | None = None) -> JsonObject:
    """A JSON-RPC error response to request ``msg_id`` (``None`` when unreadable)."""
    return {"jsonrpc": "2.0", "id": msg_id, "error": _rpc_body(code, message, data)}


def rpc_refusal(code: int, message: str, data: JsonObject | None = None) -> JsonObject:
    """A JSON-RPC error without ``id``: what the HTTP transport answers to a
    request it refuses before reading a message (the transport spec allows it)."""
    return {"jsonrpc": "2.0", "error": _rpc_body(code, message, data)}


def rest_error_body(code: str, message: str, *, retryable: bool | None = None) -> JsonObject:
    """The REST mirror's one error shape: ``{"error": {"code", "message", "retryable"}}``."""
    return {"error": Dir2mcpError(code, message, retryable=retryable).as_dict()}


def server_busy(limit: int) -> Dir2mcpError:
    """Every tool-call slot of the process is taken (MCP -32001, REST 503)."""
    return Dir2mcpError(SERVER_BUSY, f"server busy: {limit} tool calls already running; retry shortly")
