"""JSON-RPC methods of MCP 2025-11-25, independent of the transport.

HTTP (``api.py``) and stdio (``stdio.py``) both parse a message, find or
make the session, then hand the message to :func:`respond`. It returns the
response object, or ``None`` for notifications; server-to-client
notifications of a call (progress, log messages) go through ``emit``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kernel.errors import (
    FORBIDDEN,
    RPC_INVALID_PARAMS,
    RPC_INVALID_REQUEST,
    RPC_METHOD_NOT_FOUND,
    rpc_error,
)
from kernel.jsontypes import JsonObject
from mcp_gateway import completion, notify, prompts, resources, schemas, tools
from mcp_gateway.context import Context
from mcp_gateway.transport import LATEST_VERSION, SUPPORTED_VERSIONS, Message

if TYPE_CHECKING:  # imported on a paid call only (_paid_call): x402 is slow to import
    from payments.gate import Gate

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

SERVER_NAME = "dir2mcp"
SERVER_TITLE = "dir2mcp: Directory RAG MCP Server"

INSTRUCTIONS = (
    "This server answers questions about one local directory (code, docs, PDFs, images, audio). "
    "Start with dir2mcp.search to locate relevant passages, or dir2mcp.ask for a cited answer. "
    "Every hit and citation has a rel_path and a span (lines, PDF page or audio time range): pass them to "
    "dir2mcp.open_file to read the exact source before relying on it. Use dir2mcp.find for exact strings "
    "or regular expressions, dir2mcp.list_files to browse, and dir2mcp.stats if results look incomplete "
    "(indexing may still be running). All tools are read-only."
)

Emit = Callable[[JsonObject], None]

#: Methods that read files, search or call a provider: on every transport each
#: is a call, run off the thread that reads requests, cancellable and under
#: ``server.call_timeout`` (HTTP: a call slot, mcp_gateway/workers.py; stdio: a
#: worker, mcp_gateway/stdio.py). Everything else is cheap.
CALL_METHODS = frozenset({"tools/call", "resources/read", "prompts/get", "completion/complete"})

#: What a prompt or a completion hands out, as the tool that sells the same
#: (x402): the ``changes`` prompt lists files with their times (``find``'s
#: ``modified_after`` and ``list_files`` sell that), a completion offers
#: file names or defined names. While that tool is priced the method is
#: refused (:func:`unsold`), as ``resources/read`` and ``resources/list`` are
#: while ``open_file`` and ``list_files`` are (mcp_gateway/resources.py): no
#: x402 transport pays for anything but ``tools/call``, and until session 27
#: these two handed out free the names the tools sold. The ``explain`` prompt
#: embeds its file through ``resources/read``, so it is refused there; the
#: ``ask`` prompt holds nothing of the directory.
SOLD_AS = {
    "prompts/get changes": "dir2mcp.list_files",
    "completion/complete path": "dir2mcp.list_files",  # a prompt's or the file template's path
    "completion/complete symbol": "dir2mcp.symbols",
}


def unsold(method: str, params: JsonObject, ctx: Context) -> str | None:
    """The priced tool that sells what ``method`` would hand out (the method
    is then refused), or None."""
    if method == "prompts/get":
        tool = SOLD_AS.get(f"{method} {params.get('name')}")
    elif method == "completion/complete":
        argument = params.get("argument")
        name = argument.get("name") if isinstance(argument, dict) else None
        tool = SOLD_AS.get(f"{method} {name}")  # a question or a date offers nothing of the directory
    else:
        return None  # prompts/list names the prompts, nothing of the directory
    if tool is None or ctx.gate is None:
        return None
    return tool if ctx.gate.price_for(tool) is not None else None


@dataclass
class HttpReply:
    """What a method may set on the HTTP answer besides its body (x402:
    402 and ``PAYMENT-REQUIRED``, ``PAYMENT-RESPONSE``); stdio ignores it."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SessionState:
    """What a method may need to know or change about its session."""

    id: str | None
    protocol_version: str
    log_level: str = ""  # "" until logging/setLevel: no log messages
    initialized: bool = False


@functools.cache  # a metadata lookup costs ~2 ms of CPU, and every 2026-07-28 result names it
def server_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dir2mcp")
    except PackageNotFoundError:
        return "0.0.0"


def negotiate(params: JsonObject) -> str:
    """Echo the client's version when we speak it, else our latest (§3.8)."""
    requested = params.get("protocolVersion")
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def initialize_result(version: str) -> JsonObject:
    return {
        "protocolVersion": version,
        "capabilities": {
            "tools": {"listChanged": False},
            "logging": {},
            "resources": {"subscribe": True, "listChanged": True},
            "prompts": {"listChanged": False},
            "completions": {},
        },
        "serverInfo": {
            "name": SERVER_NAME,
            "title": SERVER_TITLE,
            "version": server_version(),
            "schemaVersion": schemas.SCHEMA_VERSION,
        },
        "instructions": INSTRUCTIONS,
    }


def ok(msg_id: object, result: JsonObject) -> JsonObject:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


class _Progress:
    """``notifications/progress`` for one request, strictly increasing."""

    def __init__(self, token: str | int | None, emit: Emit) -> None:
        self.token, self.emit = token, emit
        self.last: float | None = None

    def __call__(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.token is None or (self.last is not None and progress <= self.last):
            return
        self.last = progress
        params = {"progressToken": self.token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message:
            params["message"] = message
        self.emit({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})


def _logger(session: SessionState, emit: Emit) -> Callable[[str, str], None]:
    def log(level: str, message: str) -> None:
        if not session.log_level or LOG_LEVELS.index(level) < LOG_LEVELS.index(session.log_level):
            return
        params = {"level": level, "logger": "dir2mcp", "data": message}
        emit({"jsonrpc": "2.0", "method": "notifications/message", "params": params})

    return log


def progress_token(msg: Message) -> str | int | None:
    meta = msg.params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def respond(
    msg: Message,
    session: SessionState,
    ctx: Context,
    *,
    emit: Emit | None = None,
    cancel: threading.Event | None = None,
    payment: str | None = None,
    reply: HttpReply | None = None,
) -> JsonObject | None:
    """Run one message; ``tools.Cancelled`` propagates to the transport.

    ``payment`` is the ``PAYMENT-SIGNATURE`` header, if any; ``reply``
    receives the HTTP status and headers a paid call needs.
    """
    if msg.kind != "request":
        if msg.method == "notifications/initialized":
            session.initialized = True
        return None  # notifications and client responses get no answer
    emit = emit or (lambda _n: None)
    method, params = msg.method, msg.params
    if method == "initialize":
        return ok(msg.id, initialize_result(negotiate(params)))
    if method == "ping":
        return ok(msg.id, {})
    if method == "logging/setLevel":
        level = params.get("level")
        if level not in LOG_LEVELS:
            return rpc_error(msg.id, RPC_INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}")
        session.log_level = level
        return ok(msg.id, {})
    if method == "tools/list":
        cursor = params.get("cursor")
        if cursor is not None and not isinstance(cursor, str):
            return rpc_error(msg.id, RPC_INVALID_PARAMS, "cursor must be a string")
        try:
            return ok(msg.id, tools.list_page(cursor))
        except ValueError:
            return rpc_error(msg.id, RPC_INVALID_PARAMS, "invalid cursor")
    if method == "tools/call":
        return _call_tool(msg, session, ctx, emit, cancel or threading.Event(), payment, reply or HttpReply())
    if method in resources.METHODS:
        return _resources(msg, ctx, cancel)
    if method in SUBSCRIPTION_METHODS:
        return _subscription(msg, session, ctx)
    if method in PROMPT_METHODS:
        return _prompts(msg, ctx)
    return rpc_error(msg.id, RPC_METHOD_NOT_FOUND, f"method not found: {method[:100]}")


def _resources(msg: Message, ctx: Context, cancel: threading.Event | None) -> JsonObject:
    try:
        return ok(msg.id, resources.handle(msg.method, msg.params, ctx, cancel))
    except resources.ResourceError as exc:
        return rpc_error(msg.id, exc.rpc_code, exc.message, exc.data)


SUBSCRIPTION_METHODS = ("resources/subscribe", "resources/unsubscribe")


def _subscription(msg: Message, session: SessionState, ctx: Context) -> JsonObject:
    try:
        return ok(msg.id, notify.respond(msg, session.id, ctx))
    except resources.ResourceError as exc:
        return rpc_error(msg.id, exc.rpc_code, exc.message, exc.data)


PROMPT_METHODS = ("prompts/list", "prompts/get", "completion/complete")


def _prompts(msg: Message, ctx: Context) -> JsonObject:
    sold_by = unsold(msg.method, msg.params, ctx)
    if sold_by is not None:  # the same refusal as resources/read's (mcp_gateway/resources.py)
        message = f"this server sells file and symbol names: call the tool {sold_by} instead (x402)"
        return rpc_error(msg.id, RPC_INVALID_REQUEST, message, {"code": FORBIDDEN, "retryable": False})
    run = completion.complete if msg.method == "completion/complete" else prompts.METHODS[msg.method]
    try:
        return ok(msg.id, run(ctx, msg.params))
    except prompts.PromptError as exc:
        return rpc_error(msg.id, exc.rpc_code, exc.message, exc.data)


def _call_tool(
    msg: Message,
    session: SessionState,
    ctx: Context,
    emit: Emit,
    cancel: threading.Event,
    payment: str | None,
    reply: HttpReply,
) -> JsonObject:
    name = msg.params.get("name")
    if not isinstance(name, str):
        return rpc_error(msg.id, RPC_INVALID_PARAMS, "tools/call needs params.name (a string)")
    tool = tools.table().get(name)
    if tool is None:
        return rpc_error(msg.id, RPC_INVALID_PARAMS, f"Unknown tool: {name[:128]}")
    arguments = msg.params.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        return rpc_error(msg.id, RPC_INVALID_PARAMS, "params.arguments must be an object")
    call = tools.Call(
        ctx, progress=_Progress(progress_token(msg), emit), log=_logger(session, emit), cancel=cancel
    )
    if ctx.gate is None or ctx.gate.price_for(name) is None:
        return ok(msg.id, tools.run(tool, arguments, call))
    return _paid_call(
        msg, name, arguments, ctx.gate, lambda: tools.run(tool, arguments, call), payment, reply
    )


def is_paid(msg: Message, ctx: Context) -> bool:
    """A ``tools/call`` of a priced tool (answered as JSON: its HTTP status
    and headers depend on the payment, which an SSE answer has already sent)."""
    name = msg.params.get("name") if msg.method == "tools/call" else None
    return ctx.gate is not None and isinstance(name, str) and ctx.gate.price_for(name) is not None


def _paid_call(
    msg: Message,
    name: str,
    arguments: JsonObject | None,
    gate: Gate,
    run: Callable[[], JsonObject],
    payment: str | None,
    reply: HttpReply,
) -> JsonObject:
    """x402 (payments/gate.py): challenge, or verify, run, settle; the
    in-band variant reads ``_meta["x402/payment"]``."""
    # x402 and its eth libraries take ~0.6 s to import (measured): paid calls only
    from payments.gate import request_hash

    meta = msg.params.get("_meta")
    outcome = gate.handle(
        tool_name=name,
        arguments=arguments or {},
        header=payment,
        meta_payment=meta.get("x402/payment") if isinstance(meta, dict) else None,
        request_hash=request_hash(name, arguments or {}),
        run=run,
    )
    reply.status = outcome.http_status
    reply.headers.update(outcome.headers)
    if outcome.result is not None:
        return ok(msg.id, outcome.result)
    assert outcome.error is not None  # an outcome holds a result or an error
    return rpc_error(msg.id, outcome.error["code"], outcome.error["message"], outcome.error.get("data"))


def not_initialized(msg: Message) -> JsonObject:
    return rpc_error(msg.id, RPC_INVALID_REQUEST, "send initialize first")
