"""The ``/mcp`` endpoint: MCP Streamable HTTP (2025-11-25) on Django ASGI.

One async view. It runs the transport checks in the order of the reference
checklist (Host, Origin, bearer, Accept/Content-Type, size, JSON), resolves
the session from the database, then dispatches. Tool work runs in worker
threads; a ``tools/call`` that carries a progress token (or whose session
asked for log messages) is answered as an SSE stream carrying the
notifications and then the response, everything else as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading

from asgiref.sync import sync_to_async
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from corpus import errors
from mcp_gateway import context, dispatch, ratelimit, sessions, tools, transport
from mcp_gateway.transport import HttpError, Message

log = logging.getLogger(__name__)

MAX_BODY_BYTES = transport.MAX_BODY_BYTES
ALLOW = "GET, POST, DELETE, OPTIONS"
EXPOSED = "MCP-Session-Id, MCP-Protocol-Version, WWW-Authenticate, X-MCP-Session-Expired"
ALLOWED_HEADERS = "Authorization, Content-Type, Accept, MCP-Session-Id, MCP-Protocol-Version, Last-Event-ID"


class _Inflight:
    """A call running in this process: the worker's stop flag, and a future
    the request awaits alongside the work so a cancel answers at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.event = threading.Event()
        self.cancelled = loop.create_future()

    def cancel(self) -> None:
        self.event.set()
        if not self.cancelled.done():
            self.cancelled.set_result(None)


# In-flight calls of this process, for notifications/cancelled. Sessions are
# shared across processes; a cancel reaching another process is ignored, as
# the cancellation utility allows.
_inflight: dict[tuple[str, object], _Inflight] = {}


def _json(body: dict | None, status: int = 200, headers: dict | None = None) -> HttpResponse:
    response = HttpResponse(
        b"" if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8"),
        status=status,
        content_type="application/json",
    )
    if body is None:
        del response["Content-Type"]
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _refusal(exc: HttpError) -> HttpResponse:
    return _json(exc.body(), exc.status, exc.headers)


def _limits(ctx: context.Context) -> sessions.Limits:
    server = ctx.config.server
    return sessions.Limits(server.session_inactivity_timeout, server.session_max_lifetime)


def _cors(response: HttpResponse, origin: str | None) -> HttpResponse:
    if origin:
        response["Access-Control-Allow-Origin"] = origin
        response["Access-Control-Expose-Headers"] = EXPOSED
        response["Vary"] = "Origin"
    return response


@csrf_exempt
async def mcp_endpoint(request: HttpRequest) -> HttpResponse:
    origin = request.headers.get("Origin")
    cors_origin = None
    try:
        ctx = await _context()
        try:
            request.get_host()
        except DisallowedHost:
            raise HttpError(400, errors.FORBIDDEN_ORIGIN, "Host header is not allowed") from None
        transport.check_origin(origin, ctx.allowed_origins)
        cors_origin = origin
        if request.method == "OPTIONS":
            return _preflight(origin)
        transport.check_bearer(request.headers.get("Authorization"), ctx.auth.token)
        check_rate(request, ctx)
        if request.method == "POST":
            response = await _post(request, ctx)
        elif request.method == "DELETE":
            response = await _delete(request, ctx)
        elif request.method == "GET":  # no server-initiated stream is offered
            response = _json(None, 405, {"Allow": "POST, DELETE, OPTIONS"})
        else:
            response = _json(None, 405, {"Allow": ALLOW})
    except HttpError as exc:
        response = _refusal(exc)
    except errors.Dir2mcpError as exc:  # the server itself cannot start serving (config, store)
        log.error("cannot serve MCP: %s", exc)
        response = _refusal(HttpError(503, exc.code, exc.message, transport.INTERNAL_ERROR))
    except Exception:  # a bug: logged here, a JSON-RPC error (never an HTML page) on the wire
        log.exception("MCP %s failed", request.method)
        response = _refusal(HttpError(500, "INTERNAL_ERROR", "internal error; see the server log", -32603))
    return _cors(response, cors_origin)


def check_rate(request: HttpRequest, ctx: context.Context) -> None:
    bucket = ratelimit.limiter(ctx.config.server.rate_limit_per_minute)
    if bucket is None:
        return
    key = (
        f"{request.META.get('REMOTE_ADDR', '')}|{sessions.token_digest(request.headers.get('Authorization'))}"
    )
    wait = bucket.retry_after(key)
    if wait:
        raise HttpError(
            429,
            errors.RATE_LIMITED,
            f"too many requests; retry in {wait}s",
            headers={"Retry-After": str(wait)},
        )


_ctx_lock = asyncio.Lock()


async def _context() -> context.Context:
    current = context.peek()
    if current is not None:
        return current
    async with _ctx_lock:
        return await sync_to_async(context.get, thread_sensitive=False)()


def _preflight(origin: str | None) -> HttpResponse:
    response = _json(None, 204)
    response["Access-Control-Allow-Methods"] = ALLOW
    response["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
    response["Access-Control-Max-Age"] = "600"
    return response


async def _read_body(request: HttpRequest) -> bytes:
    transport.check_accept_post(request.headers.get("Accept"))
    transport.check_content_type(request.headers.get("Content-Type"))
    transport.check_declared_length(request.headers.get("Content-Length"), MAX_BODY_BYTES)
    try:
        body = request.body
    except RequestDataTooBig:
        body = None
    if body is None or len(body) > MAX_BODY_BYTES:
        raise HttpError(413, errors.INVALID_RANGE, f"request body over the {MAX_BODY_BYTES}-byte limit")
    return body


async def _post(request: HttpRequest, ctx: context.Context) -> HttpResponse:
    msg = transport.parse_message(await _read_body(request))
    if msg.kind == "request" and msg.method == "initialize":
        return await _initialize(msg, ctx)
    version = transport.check_protocol_version(request.headers.get("MCP-Protocol-Version"))
    session_id = transport.check_session_header(request.headers.get("MCP-Session-Id"))
    if msg.kind != "request":
        row = await _session(session_id, ctx)
        _notification(msg, row.session_id)
        return _json(None, 202)
    if msg.method != "tools/call" or dispatch.progress_token(msg) is None:
        # The common case: one worker hop for the session and the method.
        try:
            outcome = await _run(
                (session_id, msg.id),
                msg.id,
                lambda cancel: _lookup_and_respond(session_id, msg, version, ctx, cancel),
            )
        except sessions.SessionGone as gone:
            raise _gone(gone) from None
        if outcome is not _NEEDS_STREAM:
            return _json(outcome)
    row = await _session(session_id, ctx)
    return _stream(msg, dispatch.SessionState(row.session_id, version, row.log_level, initialized=True), ctx)


_NEEDS_STREAM = {"stream": True}


def _lookup_and_respond(session_id: str, msg: Message, version: str, ctx, cancel: threading.Event):
    """In a worker: the session, then the method, unless it must stream."""
    row = sessions.lookup(session_id, token=ctx.auth.token, limits=_limits(ctx))
    state = dispatch.SessionState(row.session_id, version, row.log_level, initialized=True)
    if msg.method == "tools/call" and state.log_level:
        return _NEEDS_STREAM  # its log messages travel on an SSE answer
    response = dispatch.respond(msg, state, ctx, cancel=cancel)
    if msg.method == "logging/setLevel" and state.log_level != row.log_level:
        sessions.set_log_level(row.session_id, state.log_level)
    return response


async def _initialize(msg: Message, ctx: context.Context) -> HttpResponse:
    version = dispatch.negotiate(msg.params)
    row = await sync_to_async(sessions.create, thread_sensitive=False)(
        protocol_version=version,
        client_info=msg.params.get("clientInfo") or {},
        token=ctx.auth.token,
        limits=_limits(ctx),
    )
    body = dispatch.ok(msg.id, dispatch.initialize_result(version))
    return _json(body, headers={"MCP-Session-Id": row.session_id})


async def _session(session_id: str, ctx: context.Context):
    try:
        return await sync_to_async(sessions.lookup, thread_sensitive=False)(
            session_id, token=ctx.auth.token, limits=_limits(ctx)
        )
    except sessions.SessionGone as gone:
        raise _gone(gone) from None


def _gone(gone: sessions.SessionGone) -> HttpError:
    headers = {"X-MCP-Session-Expired": gone.reason} if gone.reason else {}
    return HttpError(
        404, errors.SESSION_NOT_FOUND, "unknown or expired session; initialize again", None, headers
    )


def _notification(msg: Message, session_id: str) -> None:
    if msg.method == "notifications/cancelled":
        request_id = msg.params.get("requestId")
        entry = _inflight.get((session_id, request_id)) if isinstance(request_id, str | int) else None
        if entry is not None:
            entry.cancel()


async def _run(key: tuple, msg_id, job) -> dict | None:
    """Run ``job(cancel_event)`` in a worker thread, registered under ``key``
    for cancellation meanwhile.

    A cancel answers at once; the worker stops at its next check and its
    late result is dropped.
    """
    entry = _Inflight(asyncio.get_running_loop())
    _inflight[key] = entry
    work = asyncio.ensure_future(sync_to_async(job, thread_sensitive=False)(entry.event))
    try:
        await asyncio.wait({work, entry.cancelled}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.add_done_callback(_drop)
            raise tools.Cancelled()
        return work.result()
    except tools.Cancelled:
        return dispatch.error(msg_id, transport.REQUEST_CANCELLED, "request cancelled")
    finally:
        _inflight.pop(key, None)


def _drop(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a cancelled call's late failure is expected


def _sse(message: dict) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n\n"


def _stream(msg: Message, state: dispatch.SessionState, ctx) -> StreamingHttpResponse:
    """Answer on an SSE stream: notifications as they come, then the response.

    A cancelled call ends the stream without a response, as the
    cancellation utility asks; a client that hangs up cancels the work.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def emit(notification: dict) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, notification)

    async def events():
        job = lambda cancel: dispatch.respond(msg, state, ctx, emit=emit, cancel=cancel)  # noqa: E731
        task = asyncio.ensure_future(_run((state.id, msg.id), msg.id, job))
        done = asyncio.ensure_future(_when_done(task, queue))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    break
                yield _sse(item)
            response = task.result()
            if not (response and response.get("error", {}).get("code") == transport.REQUEST_CANCELLED):
                yield _sse(response)
        finally:
            if not task.done():  # the client hung up: stop the work
                entry = _inflight.get((state.id, msg.id))
                if entry is not None:
                    entry.cancel()
            done.cancel()

    response = StreamingHttpResponse(events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


_END = object()


async def _when_done(task: asyncio.Future, queue: asyncio.Queue) -> None:
    try:
        await asyncio.shield(task)
    finally:
        queue.put_nowait(_END)


async def _delete(request: HttpRequest, ctx: context.Context) -> HttpResponse:
    transport.check_protocol_version(request.headers.get("MCP-Protocol-Version"))
    row = await _session(transport.check_session_header(request.headers.get("MCP-Session-Id")), ctx)
    await sync_to_async(sessions.end, thread_sensitive=False)(row.session_id)
    return _json(None, 204)
