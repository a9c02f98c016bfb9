"""The ``/mcp`` endpoint: MCP Streamable HTTP (2025-11-25 and 2026-07-28) as an ASGI app.

One async handler, served by daphne beside Django (``dir2mcp_site/asgi.py``)
without Django's request machinery (``asgi_io.py`` says why). The gate in
front of every route (``route_gate.py``) has checked Host, Origin, the bearer
token and the rate limit; this runs the rest of the reference checklist
(Accept/Content-Type, size, JSON), resolves the session from the database,
then dispatches. Tool work runs in worker
threads; a ``tools/call`` that carries a progress token (or whose session
asked for log messages) is answered as an SSE stream carrying the
notifications and then the response, everything else as one JSON object.
``GET`` opens the session's standalone stream of resource notifications
(``standalone.py``).

A 2026-07-28 request (``modern.is_modern``) takes no session: its mirrored
headers are checked against the body (``mirrored.py``), then it runs the
same way, admitted as its address and credential, and is answered in that
revision's form (``modern.py``); ``subscriptions/listen`` is answered with
a stream that stays open (``subscriptions.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from asgiref.sync import sync_to_async
from django.db import connection

from corpus import store_faults
from kernel import errors, observe
from kernel.jsontypes import JsonObject
from mcp_gateway import (
    context,
    current,
    dispatch,
    mirrored,
    modern,
    notify,
    ratelimit,
    sessions,
    standalone,
    streams,
    subscriptions,
    tools,
    transport,
    workers,
)
from mcp_gateway.asgi_io import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Request,
    Response,
    Scope,
    Send,
    StreamResponse,
)
from mcp_gateway.context import Context
from mcp_gateway.models import McpSession
from mcp_gateway.resources import ResourceError
from mcp_gateway.transport import HttpError, Message

_R = TypeVar("_R")
#: A call in flight: (session id, request id).
_Key = tuple[str, object]

log = logging.getLogger(__name__)

MAX_BODY_BYTES = transport.MAX_BODY_BYTES
ALLOW = "GET, POST, DELETE, OPTIONS"
EXPOSED = (
    "MCP-Session-Id, MCP-Protocol-Version, WWW-Authenticate, X-MCP-Session-Expired, "
    "PAYMENT-REQUIRED, PAYMENT-RESPONSE, Retry-After"
)
ALLOWED_HEADERS = ", ".join(
    (
        "Authorization",
        "Content-Type",
        "Accept",
        "MCP-Session-Id",
        "MCP-Protocol-Version",
        "Last-Event-ID",
        "PAYMENT-SIGNATURE",
    )
)


class _Inflight:
    """A call running in this process: the worker's stop flag, and a future
    the request awaits alongside the work so a cancel answers at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
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


#: Methods that read files, search or call a provider: each is admitted to a
#: call slot and runs on a call thread under a deadline (mcp_gateway/workers.py).
#: Everything else is cheap and runs on the loop's default pool.
CALL_METHODS = dispatch.CALL_METHODS


def _call_error(msg_id: object, exc: errors.Dir2mcpError) -> JsonObject:
    """A refused (SERVER_BUSY) or overdue (DEADLINE_EXCEEDED) call, as JSON-RPC -32001."""
    return errors.rpc_error(
        msg_id, errors.RPC_SERVER_BUSY, exc.message, {"code": exc.code, "retryable": exc.retryable}
    )


_json = Response.json


def _refusal(exc: HttpError) -> Response:
    return _json(exc.body(), exc.status, exc.headers)


def _limits(ctx: context.Context) -> sessions.Limits:
    server = ctx.config.server
    return sessions.Limits(
        server.session_inactivity_timeout, server.session_max_lifetime, server.max_sessions_per_token
    )


def _cors(response: Response | StreamResponse, origin: str | None) -> Response | StreamResponse:
    if origin:
        transport.allow_origin(response.headers, origin, EXPOSED)
    return response


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The ASGI app of the endpoint (``scope["type"] == "http"``)."""
    request = Request(scope, receive)
    try:
        response = await mcp_endpoint(request)
    except ClientGone:
        return
    observe.observe_request(request.method, response.status, endpoint="mcp")
    await response.send(send, request)


async def mcp_endpoint(request: Request) -> Response | StreamResponse:
    # Host, Origin, bearer and rate limit were checked by the gate (route_gate.py):
    # an Origin here is an allowed one.
    origin = request.headers.get("origin")
    try:
        ctx = await context_async()
        if request.method == "OPTIONS":
            return _cors(_preflight(), origin)
        if request.method == "POST":
            response = await _post(request, ctx)
        elif request.method == "DELETE":
            response = await _delete(request, ctx)
        elif request.method == "GET":
            response = await _get(request, ctx)
        else:
            response = _json(None, 405, {"Allow": ALLOW})
    except HttpError as exc:
        response = _refusal(exc)
    except ClientGone:
        raise
    except errors.Dir2mcpError as exc:  # the server itself cannot start serving (config, store)
        log.error("cannot serve MCP: %s", exc)
        response = _refusal(transport.unavailable(exc))
    except Exception as exc:  # a bug: logged here, a JSON-RPC error (never an HTML page) on the wire
        fault = store_faults.classify(exc)  # a damaged database, a full disk: named, not a bug
        if fault is not None:
            log.error("cannot serve MCP: %s", fault)
            response = _refusal(transport.unavailable(fault))
        else:
            log.exception("MCP %s failed", request.method)
            response = _refusal(transport.internal_error())
    return _cors(response, origin)


def _usable_connection(fn: Callable[..., _R], *args: object, **kwargs: object) -> _R:
    """Run ``fn`` after dropping this thread's database connection if an
    error left it broken (a restarted PostgreSQL, say): Django's request
    signals would do that, and this endpoint does not send them. Healthy
    connections are kept, one per worker thread."""
    if connection.errors_occurred and not connection.is_usable():
        connection.close()
    connection.errors_occurred = False
    return fn(*args, **kwargs)


def _in_worker(fn: Callable[..., _R], *args: object, **kwargs: object) -> Awaitable[_R]:
    """``fn(*args, **kwargs)`` in a worker thread of the loop's default pool,
    awaitable: only for work that reads (or writes nothing to SQLite)."""
    return sync_to_async(_usable_connection, thread_sensitive=False)(fn, *args, **kwargs)


#: Threads of the write lane. SQLite lets one writer in at a time, so more
#: would only wait on its lock.
WRITE_THREADS = 2
_write_pool: ThreadPoolExecutor | None = None
_write_pool_lock = threading.Lock()


def _writes() -> ThreadPoolExecutor:
    global _write_pool
    with _write_pool_lock:
        if _write_pool is None:
            _write_pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="dir2mcp-session-write")
        return _write_pool


def _in_writer(fn: Callable[..., _R], *args: object, **kwargs: object) -> Awaitable[_R]:
    """``fn(*args, **kwargs)`` on the write lane, awaitable: everything the
    endpoint writes to the database (a session made, ended, touched or
    swept; a stream claimed or renewed; a subscription; a log level).

    A write waits on SQLite's lock for as long as another writer holds it
    (the indexer, a ``reindex``: up to the busy timeout, 30 s). On the
    loop's default pool (six threads on two CPUs) a flood of ``initialize``
    from one client meanwhile held every thread, and every other client's
    ``ping``, ``tools/list`` and session lookup waited behind it (a 5 s
    lock: another client's ``tools/list`` p50 5.1 s, against 10 ms).
    Here writes queue among themselves; reads never wait on them."""
    return sync_to_async(_usable_connection, thread_sensitive=False, executor=_writes())(fn, *args, **kwargs)


#: Methods outside CALL_METHODS that write to the database: run on the write lane.
WRITE_METHODS = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})

# Sessions whose upkeep (mcp_gateway/sessions.py) is queued on the write
# lane: one at a time each, however many requests find it due meanwhile.
_upkeep_pending: set[str] = set()
_upkeep_lock = threading.Lock()


def _found(session_id: str, ctx: Context) -> McpSession:
    """The live session (:class:`sessions.SessionGone` otherwise), read
    without writing, in any thread; the writes its lookup calls for (a
    touch, a sweep, an expired session's deletion) are queued on the write
    lane and not awaited."""
    limits = _limits(ctx)
    try:
        row = sessions.lookup(session_id, token=ctx.auth.token, limits=limits, write=False)
    except sessions.SessionGone as gone:
        if gone.reason:
            _upkeep(session_id, limits)
        raise
    if sessions.upkeep_due(row, limits):
        _upkeep(row.session_id, limits)
    return row


def _upkeep(session_id: str, limits: sessions.Limits) -> None:
    with _upkeep_lock:
        if session_id in _upkeep_pending:
            return
        _upkeep_pending.add(session_id)
    _writes().submit(_upkeep_one, session_id, limits)


def _upkeep_one(session_id: str, limits: sessions.Limits) -> None:
    try:
        _usable_connection(sessions.upkeep, session_id, limits)
    except Exception as exc:  # a later lookup queues it again; nothing waits on it
        log.warning("session upkeep failed: %s", store_faults.classify(exc) or exc)
    finally:
        with _upkeep_lock:
            _upkeep_pending.discard(session_id)


_ctx_lock = asyncio.Lock()


async def context_async() -> context.Context:
    found = current.peek()
    if found is not None:
        return found
    async with _ctx_lock:
        return await sync_to_async(current.get, thread_sensitive=False)()


def _preflight() -> Response:
    return _json(None, 204, transport.preflight_headers(ALLOW, ALLOWED_HEADERS))


async def _read_body(request: Request) -> bytes:
    transport.check_accept_post(request.headers.get("accept"))
    transport.check_content_type(request.headers.get("content-type"))
    transport.check_declared_length(request.headers.get("content-length"), MAX_BODY_BYTES)
    try:
        return await request.body(MAX_BODY_BYTES)
    except BodyTooLarge:
        raise HttpError(
            413, errors.INVALID_RANGE, f"request body over the {MAX_BODY_BYTES}-byte limit"
        ) from None


async def _post(request: Request, ctx: context.Context) -> Response | StreamResponse:
    msg = transport.parse_message(await _read_body(request))
    headers = request.headers
    if modern.is_modern(
        msg, header_version=headers.get("mcp-protocol-version"), session_id=headers.get("mcp-session-id")
    ):
        return await _stateless(request, msg, ctx)
    if msg.kind == "request" and msg.method == "initialize":
        return await _initialize(msg, ctx)
    version = transport.check_protocol_version(request.headers.get("mcp-protocol-version"))
    session_id = transport.check_session_header(request.headers.get("mcp-session-id"))
    if msg.kind != "request":
        row = await _session(session_id, ctx)
        _notification(msg, row.session_id)
        return _json(None, 202)
    tool_call = msg.method == "tools/call"
    paid = tool_call and dispatch.is_paid(msg, ctx)
    bounds = workers.Bounds.of(ctx.config, paid=paid) if msg.method in CALL_METHODS else None
    if not tool_call or paid or dispatch.progress_token(msg) is None:
        # The common case: one worker hop for the session and the method.
        reply = dispatch.HttpReply()
        payment = request.headers.get("payment-signature")
        try:
            outcome = await _run(
                (session_id, msg.id),
                msg.id,
                lambda cancel: _lookup_and_respond(session_id, msg, version, ctx, cancel, payment, reply),
                bounds=bounds,
                client=_call_client(request, ctx, session_id),
                lane=_in_writer if msg.method in WRITE_METHODS else _in_worker,
            )
        except sessions.SessionGone as gone:
            raise _gone(gone) from None
        except workers.Refused as refused:  # not admitted: no slot free, or a session's (host's) share taken
            return _json(_call_error(msg.id, refused), headers={"Retry-After": "1"})
        if outcome is not _NEEDS_STREAM:
            if msg.method == "resources/subscribe" and isinstance(outcome, dict) and "result" in outcome:
                # Acknowledged once a change anywhere reaches the session's
                # stream, waited for here: on the write lane it held one of
                # its two threads up to 5 s while Redis was away (session 26).
                await notify.HUB.joined()
            return _json(outcome, reply.status, reply.headers)
    row = await _session(session_id, ctx)
    state = dispatch.SessionState(row.session_id, version, row.log_level, initialized=True)
    job = lambda emit, cancel: dispatch.respond(msg, state, ctx, emit=emit, cancel=cancel)  # noqa: E731
    return _stream(msg, (session_id, msg.id), _call_client(request, ctx, session_id), job, ctx)


# Keys of stateless calls among the in-flight ones: nothing cancels them by
# id (an HTTP client cancels by closing the stream), so each is its own.
_stateless_keys = itertools.count()


def _call_client(request: Request, ctx: context.Context, session_id: str | None = None) -> workers.Client:
    """Who a call is admitted as (mcp_gateway/workers.py): its session, within
    its host (address and credential, as on the REST mirror); a stateless
    call has no session and is its host's, as a REST call is."""
    return workers.client_of(request.client, request.headers.get("x-real-ip"), ctx.auth.token, session_id)


async def _stateless(request: Request, msg: Message, ctx: context.Context) -> Response | StreamResponse:
    """A 2026-07-28 request (mcp_gateway/modern.py): no session, every fact in
    the request; its mirrored headers checked first (mcp_gateway/mirrored.py)."""
    if msg.kind != "request":
        # The revision defines no client notification over HTTP (a client
        # cancels by closing the request's stream): accepted, nothing to do.
        return _json(None, 202)
    try:
        envelope = modern.envelope(msg)
        mirrored.check(msg, request.headers, _input_schema(msg))
        modern.check_version(envelope.version)
    except modern.Refusal as refusal:
        return _json(refusal.response(msg.id), refusal.status)
    if msg.method == subscriptions.METHOD:
        return await _listen(request, msg, ctx)
    client = _call_client(request, ctx)
    key = ("stateless", next(_stateless_keys))
    paid = dispatch.is_paid(msg, ctx)
    streams = dispatch.progress_token(msg) is not None or envelope.log_level
    if msg.method == "tools/call" and not paid and streams:
        job = lambda emit, cancel: modern.respond(msg, ctx, emit=emit, cancel=cancel)  # noqa: E731
        return _stream(msg, key, client, job, ctx)
    reply = dispatch.HttpReply()
    payment = request.headers.get("payment-signature")
    bounds = workers.Bounds.of(ctx.config, paid=paid) if msg.method in CALL_METHODS else None
    try:
        outcome = await _run(
            key,
            msg.id,
            lambda cancel: modern.respond(msg, ctx, cancel=cancel, payment=payment, reply=reply),
            bounds=bounds,
            client=client,
        )
    except workers.Refused as refused:
        return _json(_call_error(msg.id, refused), headers={"Retry-After": "1"})
    status = reply.status if reply.status != 200 else modern.status_of(outcome)
    return _json(outcome, status, reply.headers)


async def _listen(request: Request, msg: Message, ctx: context.Context) -> Response | StreamResponse:
    """``subscriptions/listen``: its acknowledgment, then the change
    notifications it asked for, on an SSE answer that stays open
    (mcp_gateway/subscriptions.py); a keep-alive comment when quiet.
    Counted among this process's subscriptions and its streams (both
    before anything awaits) until the answer ends."""
    if len(_listening) >= subscriptions.max_open():
        busy = errors.Dir2mcpError(errors.SERVER_BUSY, "too many subscriptions are open here; retry later")
        return _json(_call_error(msg.id, busy), headers={"Retry-After": "1"})
    client = _stream_client(request, ctx)
    try:
        streams.admit(streams.limits(ctx.config), client)
    except errors.Dir2mcpError as busy:
        return _json(_call_error(msg.id, busy), headers={"Retry-After": "1"})
    key = f"listen-{next(_stateless_keys)}"
    _listening.add(key)

    def closed() -> None:
        _listening.discard(key)
        streams.release(client)

    try:
        listen = await _opened(request, msg, ctx)
    except BaseException as exc:
        closed()
        if isinstance(exc, ResourceError):
            return _json(errors.rpc_error(msg.id, exc.rpc_code, exc.message, exc.data))
        if isinstance(exc, workers.Refused | workers.Overdue):
            return _json(_call_error(msg.id, exc), headers={"Retry-After": "1"})
        raise
    return StreamResponse(_listen_events(listen, key), on_close=closed)


async def _opened(request: Request, msg: Message, ctx: context.Context) -> subscriptions.Listen:
    """The subscription ``msg`` asks for, judged as its client's call: up to
    a thousand URIs, each resolved against the rules (a quarter of a CPU
    second for a thousand deep ones), is work a call slot bounds. On the
    loop's default pool, one client's listens in a loop over eight
    connections kept another
    client's ``tools/list`` waiting p50 0.49 s, max 2.3 s (11 ms alone)."""
    bounds = workers.Bounds.of(ctx.config)
    work = workers.start(
        _usable_connection,
        subscriptions.open_listen,
        msg,
        ctx,
        bounds=bounds,
        client=_call_client(request, ctx),
    )
    await workers.finish(work, bounds)
    listen: subscriptions.Listen = work.result()
    return listen


def _stream_client(request: Request, ctx: context.Context) -> str:
    """Who a stream is counted for (mcp_gateway/streams.py): its address and
    credential, whichever session or subscription it is."""
    return ratelimit.client_key("stream", request.client, request.headers.get("x-real-ip"), ctx.auth.token)


# The subscriptions/listen streams open on this process, by hub key.
_listening: set[str] = set()


async def _listen_events(listen: subscriptions.Listen, key: str) -> AsyncGenerator[bytes, None]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[JsonObject | object] = asyncio.Queue()  # object: _END

    def put(item: JsonObject | object) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop has closed: the server is stopping
            pass

    sink = subscriptions.Sink(listen, put, lambda: put(_END))
    notify.HUB.attach(key, sink, listen.local)
    every = standalone.keepalive_seconds()
    try:
        await notify.HUB.joined()  # acknowledged once a change anywhere reaches it
        yield _sse(subscriptions.acknowledged(listen))
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), every)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            if not isinstance(item, dict):  # _END
                yield _sse(subscriptions.closing(listen))
                return
            yield _sse(item)
    finally:
        notify.HUB.detach(key, sink)


def _input_schema(msg: Message) -> JsonObject | None:
    """The called tool's input schema, for its ``Mcp-Param-*`` headers."""
    name = msg.params.get("name") if msg.method == "tools/call" else None
    tool = tools.table().get(name) if isinstance(name, str) else None
    return tool.input_schema if tool is not None else None


_NEEDS_STREAM = {"stream": True}


def _lookup_and_respond(
    session_id: str,
    msg: Message,
    version: str,
    ctx: Context,
    cancel: threading.Event,
    payment: str | None,
    reply: dispatch.HttpReply,
) -> JsonObject | None:
    """In a worker: the session, then the method, unless it must stream.

    A paid call never streams: its status and payment headers are known
    only once it has run."""
    row = _found(session_id, ctx)
    state = dispatch.SessionState(row.session_id, version, row.log_level, initialized=True)
    if msg.method == "tools/call" and state.log_level and not dispatch.is_paid(msg, ctx):
        return _NEEDS_STREAM  # its log messages travel on an SSE answer
    response = dispatch.respond(msg, state, ctx, cancel=cancel, payment=payment, reply=reply)
    if msg.method == "logging/setLevel" and state.log_level != row.log_level:
        sessions.set_log_level(row.session_id, state.log_level)
    return response


async def _initialize(msg: Message, ctx: context.Context) -> Response:
    version = dispatch.negotiate(msg.params)
    row = await _in_writer(
        sessions.create,
        protocol_version=version,
        client_info=msg.params.get("clientInfo") or {},
        token=ctx.auth.token,
        limits=_limits(ctx),
    )
    body = dispatch.ok(msg.id, dispatch.initialize_result(version))
    return _json(body, headers={"MCP-Session-Id": row.session_id})


async def _session(session_id: str, ctx: context.Context) -> McpSession:
    try:
        return await _in_worker(_found, session_id, ctx)
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


async def _run(
    key: _Key,
    msg_id: object,
    job: Callable[[threading.Event], JsonObject | None],
    *,
    bounds: workers.Bounds | None = None,
    client: workers.Client | None = None,
    lane: Callable[..., Awaitable[JsonObject | None]] = _in_worker,
) -> JsonObject | None:
    """Run ``job(cancel_event)`` in a worker thread, registered under ``key``
    for cancellation meanwhile. With ``bounds``, admitted as ``client``'s
    call (``SERVER_BUSY`` raised when it is not: workers.admit) on a call
    thread, and answered ``DEADLINE_EXCEEDED`` past the deadline; without,
    on ``lane`` (:func:`_in_worker`, or :func:`_in_writer` for a write).

    A cancel answers at once; the worker stops at its next check and its
    late result is dropped.

    A request whose id one of its session's calls in flight has already
    is refused (-32600), as stdio refuses it: the two shared one entry, so
    a cancel named either (session 31), and the first to end removed it.
    """
    if key in _inflight:  # MCP: an id is never reused within a session
        return errors.rpc_error(
            msg_id, errors.RPC_INVALID_REQUEST, f"request id {msg_id!r} is already in use"
        )
    entry = _Inflight(asyncio.get_running_loop())
    work: asyncio.Future[JsonObject | None]
    if bounds is None:
        work = asyncio.ensure_future(lane(job, entry.event))
    else:  # never on one of the loop's few shared threads
        assert client is not None  # every caller passing bounds names its client
        work = workers.start(_usable_connection, job, entry.event, bounds=bounds, client=client)
    _inflight[key] = entry
    try:
        if bounds is None:
            await asyncio.wait({work, entry.cancelled}, return_when=asyncio.FIRST_COMPLETED)
        else:
            try:
                await workers.finish(work, bounds, alongside=(entry.cancelled,), stop=entry.event)
            except workers.Overdue as overdue:
                return _call_error(msg_id, overdue)
        if not work.done():
            work.add_done_callback(_drop)
            raise tools.Cancelled()
        result: JsonObject | None = work.result()
        return result
    except tools.Cancelled:
        return errors.rpc_error(msg_id, errors.RPC_REQUEST_CANCELLED, "request cancelled")
    finally:
        if _inflight.get(key) is entry:
            del _inflight[key]


async def _run_or_refuse(
    key: _Key,
    msg_id: object,
    job: Callable[[threading.Event], JsonObject | None],
    *,
    bounds: workers.Bounds,
    client: workers.Client,
) -> JsonObject | None:
    """:func:`_run`, with a refused admission as the JSON-RPC answer (an SSE
    answer has begun: no status or header can say it any more)."""
    try:
        return await _run(key, msg_id, job, bounds=bounds, client=client)
    except workers.Refused as refused:
        return _call_error(msg_id, refused)


def _drop(task: asyncio.Future[_R]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a cancelled call's late failure is expected


def _sse(message: JsonObject) -> bytes:
    return b"event: message\ndata: " + json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n\n"


def _stream(
    msg: Message,
    key: _Key,
    client: workers.Client,
    job: Callable[[dispatch.Emit, threading.Event], JsonObject | None],
    ctx: Context,
) -> StreamResponse:
    """Answer on an SSE stream: notifications as they come, then the response
    of ``job(emit, cancel)``, run as ``client``'s call under ``key``.

    A cancelled call ends the stream without a response, as the
    cancellation utility asks; a client that hangs up cancels the work.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[JsonObject | object] = asyncio.Queue()  # object: _END

    def emit(notification: JsonObject) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, notification)

    async def events() -> AsyncGenerator[bytes, None]:
        bounds = workers.Bounds.of(ctx.config)
        task = asyncio.ensure_future(
            _run_or_refuse(key, msg.id, lambda cancel: job(emit, cancel), bounds=bounds, client=client)
        )
        done = asyncio.ensure_future(_when_done(task, queue))
        try:
            while True:
                item = await queue.get()
                if not isinstance(item, dict):  # _END
                    break
                yield _sse(item)
            response = task.result()
            if response is not None and not (
                response and response.get("error", {}).get("code") == errors.RPC_REQUEST_CANCELLED
            ):
                yield _sse(response)
        finally:
            if not task.done():  # the client hung up: stop the work
                entry = _inflight.get(key)
                if entry is not None:
                    entry.cancel()
            done.cancel()

    return StreamResponse(events())


_END = object()


async def _when_done(
    task: asyncio.Future[JsonObject | None], queue: asyncio.Queue[JsonObject | object]
) -> None:
    try:
        await asyncio.shield(task)
    finally:
        queue.put_nowait(_END)


async def _delete(request: Request, ctx: context.Context) -> Response:
    transport.check_protocol_version(request.headers.get("mcp-protocol-version"))
    row = await _session(transport.check_session_header(request.headers.get("mcp-session-id")), ctx)
    await _in_writer(sessions.end, row.session_id)
    notify.session_ended(row.session_id)  # its stream ends, whichever process holds it
    return _json(None, 204)


async def _get(request: Request, ctx: context.Context) -> StreamResponse:
    """The session's standalone SSE stream (mcp_gateway/standalone.py)."""
    transport.check_accept_get(request.headers.get("accept"))
    transport.check_protocol_version(request.headers.get("mcp-protocol-version"))
    row = await _session(transport.check_session_header(request.headers.get("mcp-session-id")), ctx)
    last_event_id = request.headers.get("last-event-id")
    client = _stream_client(request, ctx)
    try:
        streams.admit(streams.limits(ctx.config), client)
    except errors.Dir2mcpError as busy:
        raise HttpError(503, busy.code, busy.message, errors.RPC_SERVER_BUSY, {"Retry-After": "1"}) from None
    try:
        stream = await standalone.open_stream(row.session_id, last_event_id, _limits(ctx), _in_writer)
    except BaseException:
        streams.release(client)
        raise
    stream.on_close = lambda: streams.release(client)
    return stream
