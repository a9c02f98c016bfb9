"""Streamable HTTP transport rules (MCP 2025-11-25), as small pure checks.

Each check raises :class:`HttpError` carrying the status, our §14 code and,
where the transport wants one, a JSON-RPC error code. They apply in the
order the reference checklist gives: Host, Origin and bearer auth in the gate
in front of every route (``route_gate.py``), then in the endpoint Accept and
Content-Type, body size, then JSON parsing. The CORS headers of every
HTTP surface (``/mcp``, the REST mirror, the gate's refusals) are written
here too, by :func:`allow_origin`. Error codes and envelopes live in
``kernel/errors.py``.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.http.response import ResponseHeaders

from kernel import errors
from kernel.jsontypes import JsonObject, JsonValue, walk

LATEST_VERSION = "2025-11-25"
# Every version we speak; the header may carry any of them (the v0.1.16
# conformance suite sends 2025-03-26 after negotiating 2025-11-25).
SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# No header and no other way to know: the transport spec says assume this.
DEFAULT_HEADER_VERSION = "2025-03-26"

# The largest request body any endpoint reads (settings.DATA_UPLOAD_MAX_MEMORY_SIZE
# matches it; under `up`, mcp_gateway/bounded.py refuses more before buffering).
MAX_BODY_BYTES = 4 * 1024 * 1024

SESSION_ID_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F))


@dataclass
class HttpError(Exception):
    """A request the transport refuses before any method runs."""

    status: int
    code: str
    message: str
    rpc_code: int | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> JsonObject:
        """A JSON-RPC error without ``id`` (the transport spec allows one)."""
        rpc_code = self.rpc_code if self.rpc_code is not None else errors.RPC_INVALID_REQUEST
        return errors.rpc_refusal(rpc_code, self.message, {"code": self.code})


def unavailable(exc: errors.Dir2mcpError) -> HttpError:
    """The server itself cannot serve (configuration, store): 503 with its code."""
    return HttpError(503, exc.code, exc.message, errors.RPC_INTERNAL_ERROR)


def internal_error() -> HttpError:
    """A bug, logged by the caller: a JSON error on the wire, never a traceback or an HTML page."""
    return HttpError(
        500, errors.INTERNAL_ERROR, "internal error; see the server log", errors.RPC_INTERNAL_ERROR
    )


# -- CORS -----------------------------------------------------------------------


def allow_origin(headers: MutableMapping[str, str] | ResponseHeaders, origin: str, expose: str) -> None:
    """The CORS headers of an answer to an allowed ``origin`` (its Origin
    check passed), written into ``headers``, any mutable mapping: a browser
    may then read the body and the ``expose`` headers."""
    headers["Access-Control-Allow-Origin"] = origin
    headers["Access-Control-Expose-Headers"] = expose
    headers["Vary"] = "Origin"


def preflight_headers(methods: str, allowed: str) -> dict[str, str]:
    """The headers of a 204 answer to a CORS preflight."""
    return {
        "Access-Control-Allow-Methods": methods,
        "Access-Control-Allow-Headers": allowed,
        "Access-Control-Max-Age": "600",
    }


# -- Origin -------------------------------------------------------------------


def _origin_parts(value: str) -> tuple[str, str, int | None] | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        return None
    return parts.scheme, parts.hostname.lower(), port


def origin_allowed(origin: str, allowed: tuple[str, ...] | list[str]) -> bool:
    """Match ``origin`` against the allowlist.

    An entry without a port (``http://localhost``) allows any port on that
    scheme and host; an entry with a port allows only that port; ``*``
    allows everything (only sensible behind a proxy that checks Origin).
    """
    candidate = _origin_parts(origin)
    if candidate is None:
        return False
    scheme, host, port = candidate
    for entry in allowed:
        if entry.strip() == "*":
            return True
        rule = _origin_parts(entry)
        if rule is None:
            continue
        r_scheme, r_host, r_port = rule
        if r_scheme == scheme and r_host == host and (r_port is None or r_port == _port(scheme, port)):
            return True
    return False


def _port(scheme: str, port: int | None) -> int:
    return port if port is not None else (443 if scheme == "https" else 80)


def check_origin(origin: str | None, allowed: tuple[str, ...] | list[str]) -> None:
    if origin is None:
        return
    if not origin_allowed(origin, allowed):
        raise HttpError(403, errors.FORBIDDEN_ORIGIN, f"origin {origin[:200]!r} is not allowed")


# -- Auth ---------------------------------------------------------------------


def check_bearer(authorization: str | None, token: str | None) -> None:
    """Constant-time bearer check; ``token=None`` means auth is off."""
    if token is None:
        return
    scheme, _, presented = (authorization or "").partition(" ")
    ok = scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode("utf-8", "replace"), token.encode("utf-8")
    )
    if not ok:
        raise HttpError(
            401,
            errors.UNAUTHORIZED,
            "missing or invalid bearer token" if authorization else "missing bearer token",
            headers={"WWW-Authenticate": 'Bearer realm="dir2mcp"'},
        )


# -- Content negotiation --------------------------------------------------------


def _media_types(header: str | None) -> set[str]:
    if header is None:
        return {"*/*"}
    return {part.split(";")[0].strip().lower() for part in header.split(",") if part.strip()}


def _accepts(types: set[str], wanted: str) -> bool:
    major = wanted.split("/")[0]
    return wanted in types or "*/*" in types or f"{major}/*" in types


def check_accept_post(accept: str | None) -> None:
    """POST clients must take both JSON and SSE answers (406 otherwise).

    A missing Accept header means "anything" (RFC 9110), so it passes.
    """
    types = _media_types(accept)
    if not (_accepts(types, "application/json") and _accepts(types, "text/event-stream")):
        raise HttpError(
            406,
            errors.INVALID_FIELD,
            "Accept must list application/json and text/event-stream",
        )


def check_accept_get(accept: str | None) -> None:
    """A GET opens an SSE stream: its Accept must take text/event-stream (406 otherwise)."""
    if not _accepts(_media_types(accept), "text/event-stream"):
        raise HttpError(406, errors.INVALID_FIELD, "Accept must list text/event-stream to open the stream")


def check_content_type(content_type: str | None) -> None:
    media = (content_type or "").split(";")[0].strip().lower()
    if media != "application/json":
        raise HttpError(415, errors.INVALID_FIELD, "Content-Type must be application/json")


def check_declared_length(content_length: str | None, limit: int) -> None:
    """413 from the declared length, before any of the body is read."""
    if content_length is None:
        return
    try:
        size = int(content_length)
    except ValueError:
        raise HttpError(400, errors.INVALID_FIELD, "Content-Length is not a number") from None
    if size > limit:
        raise HttpError(413, errors.INVALID_RANGE, f"request body over the {limit}-byte limit")


# -- Protocol version and session id -------------------------------------------


def check_protocol_version(header: str | None) -> str:
    """The version a non-initialize request speaks; 400 when unsupported."""
    if header is None:
        return DEFAULT_HEADER_VERSION
    version = header.strip()
    if version not in SUPPORTED_VERSIONS:
        raise HttpError(
            400,
            errors.INVALID_FIELD,
            f"unsupported MCP-Protocol-Version {version[:40]!r}; supported: {', '.join(SUPPORTED_VERSIONS)}",
        )
    return version


def check_session_header(value: str | None) -> str:
    if value is None or not value:
        raise HttpError(400, errors.SESSION_NOT_FOUND, "missing MCP-Session-Id header; initialize first")
    if len(value) > 200 or not set(value) <= SESSION_ID_CHARS:
        raise HttpError(404, errors.SESSION_NOT_FOUND, "unknown session")
    return value


# -- JSON-RPC message -------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One parsed client message: a request, a notification or a response."""

    raw: JsonObject
    kind: str  # "request" | "notification" | "response"

    @property
    def id(self) -> JsonValue:  # as the client sent it (a string or a number)
        return self.raw.get("id")

    @property
    def method(self) -> str:
        method: str = self.raw.get("method", "")  # shape_message checked it is a string
        return method

    @property
    def params(self) -> JsonObject:
        return self.raw.get("params") or {}


#: a \\uD800-\\uDFFF escape, which may (or, after a backslash, may not) spell a surrogate
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


#: The most JSON tokens a message may hold: strings, and the ``[``, ``{``,
#: ``,`` and ``:`` between them (found 2026-11-29, session 24). Parsing runs
#: on the server's event loop, and 4 MiB of ``[[[[]]]]`` is 2 million lists
#: that ``json.loads`` and the garbage collector took 0.6 CPU-s to build:
#: a few clients posting such bodies held the loop, and every other
#: client's request (a ``ping``) waited for minutes. No message of the
#: protocol comes near the bound (tool arguments are capped by their
#: schemas; a long text is one string), and 20,000 tokens parse in a few ms.
MAX_JSON_TOKENS = 20_000
#: a string (to its closing quote, or the end of an unterminated one: a
#: token whatever follows, so no start is scanned twice), or a separator
_TOKEN = re.compile(rb'"[^"\\]*+(?:\\.?[^"\\]*+)*+(?:"|\Z)|[\[{,:]', re.DOTALL)
_TOKEN_BYTES = (b'"', b"[", b"{", b",", b":")


def check_tokens(raw: bytes | str) -> None:
    """400 (-32600 ``INVALID_RANGE``) for a body of more than
    :data:`MAX_JSON_TOKENS` tokens, before anything parses it. Counting the
    bytes that start a token settles an ordinary body at once; past the
    bound, tokens are counted only until there are too many."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if sum(data.count(byte) for byte in _TOKEN_BYTES) <= MAX_JSON_TOKENS:
        return
    for count, _ in enumerate(_TOKEN.finditer(data), 1):
        if count > MAX_JSON_TOKENS:
            raise HttpError(
                400,
                errors.INVALID_RANGE,
                f"a message may hold at most {MAX_JSON_TOKENS:,} JSON tokens (strings, brackets, "
                "commas and colons)",
                errors.RPC_INVALID_REQUEST,
            )


def loads(raw: bytes | str) -> JsonValue:
    """``json.loads``, refusing (ValueError) a string or key that holds a lone
    surrogate: JSON's escape for bytes that are not UTF-8, which no tool,
    database or encoder downstream can take (a search for one was a 500).
    A pair (an escaped emoji) is one character once decoded, and passes."""
    data: JsonValue = json.loads(raw)
    encoded = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if _SURROGATE_ESCAPE.search(encoded) and _holds_surrogate(data):
        raise ValueError("a string holds a lone surrogate escape (not Unicode text)")
    return data


def _holds_surrogate(data: object) -> bool:
    return any(isinstance(value, str) and _SURROGATE.search(value) for value in walk(data))


def parse_message(body: bytes) -> Message:
    """Parse and shape-check a POST body (400 with -32700 / -32600)."""
    check_tokens(body)
    try:
        data = loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: absurdly deep nesting
        raise HttpError(400, errors.INVALID_FIELD, "body is not valid JSON", errors.RPC_PARSE_ERROR) from None
    if isinstance(data, list):
        raise HttpError(
            400,
            errors.INVALID_FIELD,
            "JSON-RPC batches are not supported (removed in 2025-06-18)",
            errors.RPC_INVALID_REQUEST,
        )
    return shape_message(data)


def shape_message(data: object) -> Message:
    def invalid(why: str) -> HttpError:
        return HttpError(
            400, errors.INVALID_FIELD, f"invalid JSON-RPC message: {why}", errors.RPC_INVALID_REQUEST
        )

    if not isinstance(data, dict):
        raise invalid("expected an object")
    if data.get("jsonrpc") != "2.0":
        raise invalid('"jsonrpc" must be "2.0"')
    has_id = "id" in data
    if has_id and (
        data["id"] is None or isinstance(data["id"], bool) or not isinstance(data["id"], str | int)
    ):
        raise invalid('"id" must be a string or an integer (not null, a boolean or a fraction)')
    if "method" in data:
        if not isinstance(data["method"], str) or not data["method"]:
            raise invalid('"method" must be a non-empty string')
        if "params" in data and not isinstance(data["params"], dict):
            raise invalid('"params" must be an object')
        return Message(data, "request" if has_id else "notification")
    if has_id and ("result" in data) != ("error" in data):
        return Message(data, "response")
    raise invalid('needs "method", or "result"/"error" with an "id"')
