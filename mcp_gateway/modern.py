"""MCP 2026-07-28, the stateless revision, beside 2025-11-25 (``dispatch.py``).

A request is served statelessly when it says so: its ``params._meta``
names a protocol version (``io.modelcontextprotocol/protocolVersion``), or
it is ``server/discover``, or (HTTP, no session header) its
``MCP-Protocol-Version`` header names a version that is not one of the
handshake versions. Everything else (``initialize``, then requests with
``MCP-Session-Id``) is 2025-11-25 exactly as before. :func:`is_modern`
decides; HTTP (``api.py``) and stdio (``stdio.py``) both ask it.

A modern request carries what a session used to hold: the protocol version
and the client's capabilities in ``_meta`` (both required: -32602), and
optionally its log level (``io.modelcontextprotocol/logLevel``: log
messages only for a request that asks). :func:`respond` runs it through
the same methods as a session (``dispatch.respond``: the one tool registry,
gate and exclusion engine) and rewrites the answer in the revision's form:

- every result carries ``resultType: "complete"`` and the server's
  identity in ``_meta`` (``io.modelcontextprotocol/serverInfo``);
- cacheable results carry ``ttlMs`` and ``cacheScope`` (:data:`CACHE`);
- a resource that is not there is -32602 (never the old -32002), with its URI;
- methods the revision removed (``initialize``, ``ping``,
  ``logging/setLevel``, ``resources/subscribe``/``unsubscribe``) and unknown
  methods are -32601, which HTTP answers with 404.

Errors always carry the request's id.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import dispatch
from mcp_gateway.context import Context
from mcp_gateway.transport import SUPPORTED_VERSIONS as HANDSHAKE_VERSIONS
from mcp_gateway.transport import Message

VERSION = "2026-07-28"
#: The versions served statelessly.
MODERN_VERSIONS = (VERSION,)
#: Every version this server speaks, newest first: statelessly, then through
#: ``initialize`` and a session (server/discover's ``supportedVersions``).
SUPPORTED = (*MODERN_VERSIONS, *reversed(HANDSHAKE_VERSIONS))

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# The codes the revision defines (-32020..-32099 are reserved for it).
RPC_HEADER_MISMATCH = -32020
RPC_MISSING_CAPABILITY = -32021
RPC_UNSUPPORTED_VERSION = -32022

#: Methods this revision removed: -32601 (HTTP 404) when asked statelessly.
REMOVED = frozenset(
    {"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"}
)

#: Caching hints (``ttlMs``, ``cacheScope``) of the cacheable results. The
#: tool, prompt and template lists and the server's description change only
#: with the server itself (a restart), and are the same for every caller:
#: public, an hour. The file list and the files' contents are the corpus's
#: own data behind the bearer token: private, and fresh for five seconds,
#: since live sync changes them whenever a file does (a client that cannot
#: wait that long re-reads with its cache bypassed).
CACHE = {
    "server/discover": (3_600_000, "public"),
    "tools/list": (3_600_000, "public"),
    "prompts/list": (3_600_000, "public"),
    "resources/templates/list": (3_600_000, "public"),
    "resources/list": (5_000, "private"),
    "resources/read": (5_000, "private"),
}


class Refusal(Exception):
    """A modern request refused before any method runs: a JSON-RPC error and
    the HTTP status the revision gives it (400, or 404 for -32601)."""

    def __init__(
        self, rpc_code: int, message: str, data: JsonObject | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.rpc_code, self.message, self.data, self.status = rpc_code, message, data, status

    def response(self, msg_id: object) -> JsonObject:
        return errors.rpc_error(msg_id, self.rpc_code, self.message, self.data)


@dataclass(frozen=True)
class Envelope:
    """What a modern request says about itself in ``_meta``."""

    version: str
    capabilities: JsonObject
    client_info: JsonObject
    log_level: str  # "" when the request did not ask for log messages


def meta(msg: Message) -> JsonObject | None:
    value = msg.params.get("_meta")
    return value if isinstance(value, dict) else None


def is_modern(msg: Message, *, header_version: str | None = None, session_id: str | None = None) -> bool:
    """Whether ``msg`` is served statelessly (see the module's docstring)."""
    fields = meta(msg)
    if fields is not None and META_VERSION in fields:
        return True  # an initialize that says so too: the revision removed it (-32601)
    if msg.method == "initialize":
        return False
    if msg.method == "server/discover":
        return True
    if header_version is None or session_id is not None:
        return False
    return header_version.strip() not in HANDSHAKE_VERSIONS


def envelope(msg: Message) -> Envelope:
    """The request's ``_meta`` fields; :class:`Refusal` -32602 when a required
    one is missing or malformed. The version itself is :func:`check_version`'s
    (HTTP compares it with its header first)."""
    fields = meta(msg)
    if fields is None:
        raise Refusal(errors.RPC_INVALID_PARAMS, "params._meta is required")
    version = fields.get(META_VERSION)
    if not isinstance(version, str) or not version:
        raise Refusal(errors.RPC_INVALID_PARAMS, f"params._meta[{META_VERSION!r}] (a string) is required")
    capabilities = fields.get(META_CAPABILITIES)
    if not isinstance(capabilities, dict):
        raise Refusal(errors.RPC_INVALID_PARAMS, f"params._meta[{META_CAPABILITIES!r}] (object) is required")
    level = fields.get(META_LOG_LEVEL, "")
    if level != "" and level not in dispatch.LOG_LEVELS:
        raise Refusal(
            errors.RPC_INVALID_PARAMS,
            f"params._meta[{META_LOG_LEVEL!r}] must be one of {', '.join(dispatch.LOG_LEVELS)}",
        )
    info = fields.get(META_CLIENT_INFO)
    return Envelope(version, capabilities, info if isinstance(info, dict) else {}, level)


def check_version(version: str) -> None:
    if version in MODERN_VERSIONS:
        return
    handshake = version in HANDSHAKE_VERSIONS
    how = " (handshake versions through initialize and MCP-Session-Id)" if handshake else ""
    raise Refusal(
        RPC_UNSUPPORTED_VERSION,
        f"Unsupported protocol version {version[:40]!r}; supported: {', '.join(SUPPORTED)}{how}",
        {"supported": list(SUPPORTED), "requested": version[:200]},
    )


# -- the answers ------------------------------------------------------------------------


def server_info() -> JsonObject:
    version = dispatch.server_version()
    return {"name": dispatch.SERVER_NAME, "title": dispatch.SERVER_TITLE, "version": version}


def capabilities() -> JsonObject:
    """What a modern client may use. Resource changes come through
    ``subscriptions/listen`` (mcp_gateway/subscriptions.py); the tool and
    prompt lists do not change while the server runs."""
    return {
        "tools": {},
        "resources": {"subscribe": True, "listChanged": True},
        "prompts": {},
        "completions": {},
        "logging": {},
    }


def discover_result() -> JsonObject:
    return {
        "supportedVersions": list(SUPPORTED),
        "capabilities": capabilities(),
        "instructions": dispatch.INSTRUCTIONS,
    }


def finish(response: JsonObject | None, method: str) -> JsonObject | None:
    """``response`` in the revision's form (see the module's docstring)."""
    if response is None:
        return None
    if "error" in response:
        error = response["error"]
        if error.get("code") == errors.RPC_RESOURCE_NOT_FOUND:  # -32002 is not this revision's
            response = {**response, "error": {**error, "code": errors.RPC_INVALID_PARAMS}}
        return response
    result = dict(response.get("result") or {})
    result["resultType"] = "complete"
    result["_meta"] = {**(result.get("_meta") or {}), META_SERVER_INFO: server_info()}
    if method in CACHE:
        result["ttlMs"], result["cacheScope"] = CACHE[method]
    return {**response, "result": result}


def status_of(response: JsonObject | None) -> int:
    """The HTTP status of an answer: 404 for an unknown or removed method, else 200."""
    if response and response.get("error", {}).get("code") == errors.RPC_METHOD_NOT_FOUND:
        return 404
    return 200


def respond(
    msg: Message,
    ctx: Context,
    *,
    emit: dispatch.Emit | None = None,
    cancel: threading.Event | None = None,
    payment: str | None = None,
    reply: dispatch.HttpReply | None = None,
) -> JsonObject | None:
    """Answer one modern message (``tools.Cancelled`` propagates, as from
    ``dispatch.respond``); ``None`` for notifications."""
    if msg.kind != "request":
        return None
    try:
        env = envelope(msg)
        check_version(env.version)
    except Refusal as refusal:
        return refusal.response(msg.id)
    if msg.method in REMOVED:
        return errors.rpc_error(
            msg.id, errors.RPC_METHOD_NOT_FOUND, f"{msg.method} is not part of protocol version {VERSION}"
        )
    if msg.method == "server/discover":
        return finish(dispatch.ok(msg.id, discover_result()), msg.method)
    state = dispatch.SessionState(None, env.version, env.log_level, initialized=True)
    answer = dispatch.respond(msg, state, ctx, emit=emit, cancel=cancel, payment=payment, reply=reply)
    return finish(answer, msg.method)
