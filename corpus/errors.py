"""Canonical error codes (spec §14) and process exit codes (spec §2.4).

Every layer raises :class:`Dir2mcpError` with one of these codes; the CLI
maps it to an exit code and the MCP gateway to a tool error, so a code means
the same thing everywhere.
"""

from __future__ import annotations

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

_EXIT_FOR_CODE = {
    CONFIG_INVALID: EXIT_CONFIG,
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
    MISTRAL_RATE_LIMIT,
    ELEVENLABS_RATE_LIMIT,
    PROVIDER_RATE_LIMIT,
    INDEX_NOT_READY,
    INDEX_LOCKED,
}


class Dir2mcpError(Exception):
    """An error with a canonical code and a message safe to show a user."""

    def __init__(self, code: str, message: str, *, hint: str = "", retryable: bool | None = None):
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

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}
