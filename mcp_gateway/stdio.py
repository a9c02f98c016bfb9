"""MCP over stdio (2025-11-25 and 2026-07-28): newline-delimited JSON-RPC on stdin/stdout.

``mcp_stdio`` runs :func:`serve`. The client launches us as a subprocess,
writes one JSON-RPC message per line on our stdin and reads one per line
from our stdout; anything else we print (logs, progress of the background
indexer) goes to stderr. The stream rules this module keeps:

* stdout carries nothing but whole protocol messages, one per line, written
  under a lock so lines never interleave. ``StdoutGuard``
  (:mod:`mcp_gateway.stdout_guard`) points file descriptor 1 and
  ``sys.stdout`` at stderr for the whole run and keeps a
  private handle on the real stdout, so a stray ``print``, a log handler or
  a child process cannot corrupt the stream.
* every line is answered or deliberately ignored: invalid JSON -32700,
  batches, invalid messages and lines over :data:`MAX_LINE_BYTES` -32600,
  requests before ``initialize`` -32600 (``ping`` is always allowed),
  notifications and client responses nothing.
* a call (``tools/call``, ``resources/read``, ``prompts/get``,
  ``completion/complete``: ``dispatch.CALL_METHODS``, as on HTTP) runs on a
  few worker threads, so ``ping`` answers and ``notifications/cancelled``
  stops a call while it runs; a cancelled call gets no response. A call
  not answered within ``server.call_timeout`` of being read is answered
  ``DEADLINE_EXCEEDED`` (-32001) and its stop event set, as on HTTP (until
  session 27 the three besides ``tools/call`` ran on the reader itself, and
  no call had a deadline: a slice far into a huge file held the reader, so
  no ``ping``, cancellation or end of input was read, for a quarter of an
  hour). ``subscriptions/listen`` runs on a worker too, and
  ``resources/subscribe`` and ``unsubscribe`` on a lane of their own, one
  thread in the order they were read: a subscribe may wait for the fan-out
  group, and an unsubscribe written right after it must not overtake it.
  The other methods are quick and are answered in order.
* EOF on stdin, SIGINT or SIGTERM stop the indexer, give in-flight calls a
  moment to finish, and return (exit 0).
* resource notifications (``notifications/resources/updated`` for the
  session's subscriptions, ``list_changed``) are written as the indexer's
  changes arrive (mcp_gateway/notify.py), once the client has sent
  ``notifications/initialized``.
* a 2026-07-28 request (its ``_meta`` names the version, or
  ``server/discover``) needs no ``initialize`` and is answered statelessly
  (mcp_gateway/modern.py), beside the session; each ``subscriptions/listen``
  writes its acknowledgment, then its tagged notifications, until
  ``notifications/cancelled`` names it (mcp_gateway/subscriptions.py).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import BinaryIO

from corpus import store_faults
from corpus.events import Reporter
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import dispatch, modern, notify, subscriptions, tools, transport, workers
from mcp_gateway.background import BackgroundIndexer, start_background_indexing
from mcp_gateway.context import Context
from mcp_gateway.notify import HUB, LOCAL
from mcp_gateway.resources import ResourceError
from mcp_gateway.transport import HttpError, Message

log = logging.getLogger(__name__)

#: A line longer than this is refused (-32600) and skipped up to its newline.
MAX_LINE_BYTES = 4 * 1024 * 1024
#: Concurrent ``tools/call`` workers.
WORKERS = 4
#: How long shutdown waits for in-flight calls before cancelling them.
DRAIN_SECONDS = 5.0
#: How long shutdown waits for the background indexer to reach a safe point.
INDEXER_STOP_SECONDS = 30.0
#: How often the deadlines of calls in flight are looked at (a call is
#: answered ``DEADLINE_EXCEEDED`` at most this late).
DEADLINE_TICK = 0.1

#: ``resources/subscribe`` and ``unsubscribe`` run on one thread of their own
#: (the subscription lane), never on the reader: a subscribe may wait up to
#: ``notify.READY_SECONDS`` for the fan-out group while Redis is away
#: (``HUB.ready``; session 27: the reader read nothing else meanwhile), and
#: one thread keeps a subscribe and the unsubscribe after it in order (on
#: the workers, the unsubscribe was answered first and the client stayed
#: subscribed). At most this many wait there; one more is SERVER_BUSY.
SUBSCRIPTION_LANE_DEPTH = 64

#: The key of stdio's one session among the notification hub's sinks.
STDIO_SESSION = "stdio"

_READ_CHUNK = 64 * 1024
_TOO_LONG = object()


# -- the stream -----------------------------------------------------------------


def encode(message: JsonObject) -> bytes:
    """One protocol line. JSON escapes control characters, so the only
    newline is the terminator; lone surrogates fall back to \\u escapes."""
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode("ascii") + b"\n"


class LineWriter:
    """Whole messages to the protocol stream, one line each, never interleaved."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self.broken = threading.Event()  # the client stopped reading

    def write(self, message: JsonObject) -> bool:
        try:
            data = encode(message)
        except (TypeError, ValueError):  # a bug: never send half a message
            log.exception("cannot encode a protocol message")
            if "id" not in message or "method" in message:
                return False
            data = encode(errors.rpc_error(message["id"], errors.RPC_INTERNAL_ERROR, "internal error"))
        with self._lock:
            if self.broken.is_set():
                return False
            try:
                self._stream.write(data)
                self._stream.flush()
            except (OSError, ValueError):
                self.broken.set()
                return False
        return True


def read_lines(fd: int, limit: int = MAX_LINE_BYTES) -> Iterator[bytes | object]:
    """Lines of ``fd`` without their newline, until EOF.

    Reads with ``os.read`` (no buffered-reader lock for a blocked daemon
    thread to hold at interpreter exit). A line over ``limit`` bytes yields
    ``_TOO_LONG`` as soon as it passes the limit, and the rest of it, up to
    its newline, is dropped unread.
    """
    buffer = bytearray()
    skipping = False
    while True:
        try:
            chunk = os.read(fd, _READ_CHUNK)
        except OSError:
            break
        if not chunk:
            break
        start = 0
        while start <= len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            if not skipping:
                if len(buffer) + (end - start) > limit:
                    buffer.clear()
                    skipping = True
                    yield _TOO_LONG
                else:
                    buffer += chunk[start:end]
            if newline < 0:
                break
            if not skipping:
                yield bytes(buffer)
            buffer.clear()
            skipping = False
            start = newline + 1
    if buffer and not skipping:
        yield bytes(buffer)


# -- calls in flight ------------------------------------------------------------


class _Call:
    """One call being worked on; what cancellation, its deadline and
    completion agree on, so that nothing is written after any of them."""

    def __init__(self, msg: Message, writer: LineWriter, timeout: float) -> None:
        self.msg = msg
        self.writer = writer
        self.cancel = threading.Event()
        self._lock = threading.Lock()
        self._over = False
        #: ``time.monotonic()`` past which the call is overdue; None: no deadline
        self.deadline = time.monotonic() + timeout if timeout > 0 else None
        self.timeout = timeout

    def emit(self, notification: JsonObject) -> None:
        """Progress and log notifications, only while the call is live."""
        self.emit_live(notification)

    def emit_live(self, notification: JsonObject) -> bool:
        """:meth:`emit`, saying whether it wrote (False once the call is over)."""
        with self._lock:
            if self._over or self.cancel.is_set():
                return False
            return self.writer.write(notification)

    def finish(self, response: JsonObject | None) -> None:
        with self._lock:
            self._over = True
            if response is not None and not self.cancel.is_set():
                self.writer.write(response)

    def abandon(self) -> None:
        """``notifications/cancelled``: stop the work, send no response."""
        with self._lock:
            self.cancel.set()

    def overdue(self) -> None:
        """Past the deadline: stop the work and answer ``DEADLINE_EXCEEDED``
        (as ``up`` does: mcp_gateway/workers.py), unless already answered."""
        with self._lock:
            if self._over or self.cancel.is_set():
                return
            self._over = True
            self.cancel.set()
            late = workers.deadline_exceeded(self.timeout)
            data = {"code": late.code, "retryable": late.retryable}
            self.writer.write(errors.rpc_error(self.msg.id, errors.RPC_SERVER_BUSY, late.message, data))


class StdioServer:
    """One client on one pair of pipes: a single session for the process."""

    def __init__(
        self,
        ctx: Context,
        *,
        infd: int,
        out: BinaryIO,
        workers: int = WORKERS,
        max_line: int = MAX_LINE_BYTES,
    ) -> None:
        self.ctx = ctx
        #: calls accepted and not yet answered (queued or running); one more is
        #: SERVER_BUSY, so a client that writes calls without reading answers
        #: cannot grow the queue without end (session 25b)
        self.max_calls = ctx.config.server.max_concurrent_calls
        self.infd = infd
        self.max_line = max_line
        self.writer = LineWriter(out)
        self.session = dispatch.SessionState(id=None, protocol_version=transport.LATEST_VERSION)
        self.initialized = False
        self.eof = threading.Event()
        self._inflight: dict[object, _Call] = {}
        self._listens: dict[object, subscriptions.Sink] = {}  # open subscriptions/listen, by request id
        self._lock = threading.Lock()
        self._jobs: queue.Queue[_Call | None] = queue.Queue()
        self._lane: queue.Queue[Message | None] = queue.Queue(SUBSCRIPTION_LANE_DEPTH)
        self._stopped = threading.Event()  # the deadline watcher's end
        # Daemon threads, not a ThreadPoolExecutor: a call that never returns
        # must not keep the process alive after shutdown gave up on it.
        self._workers = [
            threading.Thread(target=self._work, name=f"mcp-stdio-{i}", daemon=True) for i in range(workers)
        ]

    # -- reading --

    def start(self) -> None:
        for worker in self._workers:
            worker.start()
        threading.Thread(target=self._watch_deadlines, name="mcp-stdio-deadlines", daemon=True).start()
        threading.Thread(target=self._subscriptions, name="mcp-stdio-subscriptions", daemon=True).start()
        threading.Thread(target=self._read, name="mcp-stdio-reader", daemon=True).start()

    def _read(self) -> None:
        try:
            for line in read_lines(self.infd, self.max_line):
                if self.writer.broken.is_set():
                    break
                if not isinstance(line, bytes):  # _TOO_LONG
                    self.writer.write(
                        errors.rpc_error(
                            None,
                            errors.RPC_INVALID_REQUEST,
                            f"message over the {self.max_line}-byte line limit",
                        )
                    )
                    continue
                try:
                    self.handle_line(line)
                except Exception:  # one bad message must not stop the reader
                    log.exception("cannot handle a stdio message")
        finally:
            self.eof.set()

    def handle_line(self, raw: bytes) -> None:
        if not raw.strip():
            return  # blank lines (or a stray "\r") carry no message
        try:
            transport.check_tokens(raw)
        except HttpError as exc:
            self.writer.write(errors.rpc_error(None, errors.RPC_INVALID_REQUEST, exc.message))
            return
        try:
            data = transport.loads(raw)
        except (ValueError, RecursionError):
            self.writer.write(errors.rpc_error(None, errors.RPC_PARSE_ERROR, "parse error: not valid JSON"))
            return
        if isinstance(data, list):
            self.writer.write(
                errors.rpc_error(
                    None,
                    errors.RPC_INVALID_REQUEST,
                    "JSON-RPC batches are not supported (removed in 2025-06-18)",
                )
            )
            return
        try:
            msg = transport.shape_message(data)
        except HttpError as exc:
            code = exc.rpc_code if exc.rpc_code is not None else errors.RPC_INVALID_REQUEST
            self.writer.write(errors.rpc_error(_readable_id(data), code, exc.message))
            return
        self.handle(msg)

    def handle(self, msg: Message) -> None:
        if msg.kind == "response":
            return  # we never send requests, so there is nothing to match
        if msg.kind == "notification":
            if msg.method == "notifications/cancelled":
                self._cancel(msg.params.get("requestId"))
            dispatch.respond(msg, self.session, self.ctx)
            return
        stateless = modern.is_modern(msg)
        if msg.method == "initialize" and not stateless:  # a 2026-07-28 one is refused (-32601)
            self.initialized = True
        elif not (stateless or self.initialized or msg.method == "ping"):
            self.writer.write(dispatch.not_initialized(msg))
            return
        if msg.method in dispatch.CALL_METHODS or (msg.method == subscriptions.METHOD and stateless):
            self._submit(msg)
            return
        if msg.method in notify.METHODS:
            try:
                self._lane.put_nowait(msg)
            except queue.Full:
                refused = errors.server_busy(SUBSCRIPTION_LANE_DEPTH)
                data = {"code": refused.code, "retryable": True}
                self.writer.write(errors.rpc_error(msg.id, errors.RPC_SERVER_BUSY, refused.message, data))
            return
        response = self._respond(msg, None, None)
        if msg.method == "initialize" and response and "result" in response:
            self.session.protocol_version = response["result"]["protocolVersion"]
        if response is not None:
            self.writer.write(response)

    def _subscriptions(self) -> None:
        """The subscription lane: subscribe and unsubscribe answered one at a
        time, in the order they were read."""
        while (msg := self._lane.get()) is not None:
            response = self._respond(msg, None, None)
            if response is not None:
                self.writer.write(response)

    # -- subscriptions/listen (2026-07-28) --

    def _listen(self, call: _Call) -> JsonObject | None:
        """On a worker: acknowledge, then write the subscription's
        notifications as they come, until ``notifications/cancelled`` names
        it or the server stops. The answer to send, if any (an error); a
        listen cancelled or overdue before its acknowledgment opens nothing."""
        msg = call.msg
        try:
            modern.check_version(modern.envelope(msg).version)
            listen = subscriptions.open_listen(msg, self.ctx)
        except modern.Refusal as refusal:
            return refusal.response(msg.id)
        except ResourceError as exc:
            return errors.rpc_error(msg.id, exc.rpc_code, exc.message, exc.data)
        HUB.ready()  # acknowledged once a change anywhere reaches this process
        sink = subscriptions.Sink(listen, self.writer.write, lambda: self.end_listen(msg.id))
        if not call.emit_live(subscriptions.acknowledged(listen)):  # first, before any notification
            return None
        # Attached before it is listed: a cancel on the reader that finds it
        # listed detaches an attached sink (listed first, a cancel between
        # the two found it, detached nothing, and the attach that followed
        # streamed to a cancelled listen for as long as the process ran).
        HUB.attach(_listen_key(msg.id), sink, listen.local)
        with self._lock:
            self._listens[msg.id] = sink
        if call.cancel.is_set():  # cancelled after its acknowledgment, before it was listed
            self.end_listen(msg.id, graceful=False)
        return None

    def end_listen(self, request_id: object, *, graceful: bool = True) -> bool:
        """Close one subscription (with its closing result when ``graceful``);
        False when there was none."""
        with self._lock:
            sink = self._listens.pop(request_id, None)
        if sink is None:
            return False
        HUB.detach(_listen_key(request_id), sink)
        if graceful:
            self.writer.write(subscriptions.closing(sink.listen))
        return True

    def end_listens(self) -> None:
        with self._lock:
            ids = list(self._listens)
        for request_id in ids:
            self.end_listen(request_id)

    # -- calls --

    def _submit(self, msg: Message) -> None:
        paid = msg.method == "tools/call" and dispatch.is_paid(msg, self.ctx)
        call = _Call(msg, self.writer, workers.Bounds.of(self.ctx.config, paid=paid).deadline)
        with self._lock:
            busy = len(self._inflight) >= self.max_calls
            duplicate = msg.id in self._inflight or msg.id in self._listens
            if not (busy or duplicate):
                self._inflight[msg.id] = call
        if busy and not duplicate:
            refused = errors.server_busy(self.max_calls)
            data = {"code": refused.code, "retryable": True}
            self.writer.write(errors.rpc_error(msg.id, errors.RPC_SERVER_BUSY, refused.message, data))
            return
        if duplicate:
            self.writer.write(
                errors.rpc_error(
                    msg.id, errors.RPC_INVALID_REQUEST, f"request id {msg.id!r} is already in use"
                )
            )
            return
        self._jobs.put(call)

    def _work(self) -> None:
        while True:
            call = self._jobs.get()
            if call is None:
                return
            response = None
            try:
                if call.cancel.is_set():
                    pass
                elif call.msg.method == subscriptions.METHOD:  # only stateless ones are submitted
                    response = self._guarded(call.msg, functools.partial(self._listen, call))
                else:
                    response = self._respond(call.msg, call.emit, call.cancel)
            finally:
                with self._lock:
                    self._inflight.pop(call.msg.id, None)
                call.finish(response)

    def _watch_deadlines(self) -> None:
        """Answer each call still unanswered at its deadline (queued or
        running) ``DEADLINE_EXCEEDED`` and set its stop event. The call keeps
        its place among ``max_calls`` until its worker returns, so the bound
        counts real work, as a slot does on HTTP."""
        while not self._stopped.wait(DEADLINE_TICK):
            now = time.monotonic()
            with self._lock:
                late = [c for c in self._inflight.values() if c.deadline is not None and c.deadline <= now]
            for call in late:
                call.overdue()

    def _respond(
        self, msg: Message, emit: dispatch.Emit | None, cancel: threading.Event | None
    ) -> JsonObject | None:
        if modern.is_modern(msg):  # 2026-07-28: no session, everything in the request
            return self._guarded(msg, lambda: modern.respond(msg, self.ctx, emit=emit, cancel=cancel))
        return self._guarded(
            msg, lambda: dispatch.respond(msg, self.session, self.ctx, emit=emit, cancel=cancel)
        )

    def _guarded(self, msg: Message, answer: Callable[[], JsonObject | None]) -> JsonObject | None:
        """``answer()``, with a failure named (a damaged store) or logged and
        answered ``INTERNAL_ERROR``, never a traceback on the wire."""
        try:
            return answer()
        except tools.Cancelled:
            return None
        except Exception as exc:  # a bug must not become a traceback on the wire
            fault = store_faults.classify(exc)  # a damaged database, a full disk: named, not a bug
            if fault is not None:
                return errors.rpc_error(msg.id, errors.RPC_INTERNAL_ERROR, fault.message, fault.as_dict())
            log.exception("%s failed", msg.method)
            return errors.rpc_error(
                msg.id, errors.RPC_INTERNAL_ERROR, f"{msg.method} failed; see the server log"
            )

    def _cancel(self, request_id: object) -> None:
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return  # invalid cancellations are ignored
        if self.end_listen(request_id, graceful=False):
            return
        with self._lock:
            call = self._inflight.get(request_id)
        if call is not None:
            call.abandon()

    # -- stopping --

    def inflight(self) -> int:
        with self._lock:
            return len(self._inflight)

    def drain(self, timeout: float, force: _Hurry | None = None) -> None:
        """Let in-flight calls finish for up to ``timeout``, then cancel the rest."""
        deadline = time.monotonic() + timeout
        while self.inflight() and time.monotonic() < deadline and not (force and force.is_set()):
            time.sleep(0.05)
        with self._lock:
            left = list(self._inflight.values())
        for call in left:
            call.abandon()
        for _ in self._workers:
            self._jobs.put(None)
        try:
            self._lane.put_nowait(None)
        except queue.Full:  # a lane that full is stuck on a subscribe: its thread is a daemon
            pass
        self._stopped.set()


class NotificationSink:
    """The resource notifications of stdio's one session (``notify.Sink``)."""

    def __init__(self, server: StdioServer) -> None:
        self.server = server

    def send(self, notification: JsonObject) -> None:
        if self.server.session.initialized:
            self.server.writer.write(notification)

    def close(self) -> None:
        """The session lasts as long as the process."""


def _listen_key(request_id: object) -> str:
    """A subscription's key among the hub's sinks (``repr``: 1 and "1" differ)."""
    return f"{STDIO_SESSION}-listen:{request_id!r}"


def _readable_id(data: object) -> str | int | None:
    """The id of an invalid message, when one can be read (else null)."""
    if isinstance(data, dict):
        msg_id = data.get("id")
        if isinstance(msg_id, str | int) and not isinstance(msg_id, bool):
            return msg_id
    return None


# -- the command's loop -----------------------------------------------------------


def serve(
    ctx: Context,
    *,
    out: BinaryIO,
    infd: int = 0,
    reporter: Reporter | None = None,
    index: bool = True,
    drain_seconds: float = DRAIN_SECONDS,
    indexer_stop_seconds: float = INDEXER_STOP_SECONDS,
) -> str:
    """Serve ``ctx`` on ``infd``/``out`` until EOF, SIGINT or SIGTERM; why it stopped.

    With ``index``, the root is indexed in the background and followed
    for changes (the same indexer ``up`` runs), sharing ``ctx.embedder``
    with the tools.
    """
    reporter = reporter or Reporter.silent()
    server = StdioServer(ctx, infd=infd, out=out)
    stop = threading.Event()  # the indexer's stop
    signalled: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only flags: a handler must not take a lock the main thread may hold.
        signalled.append(signum)

    in_main = threading.current_thread() is threading.main_thread()
    previous = (
        {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)} if in_main else {}
    )
    indexer = None
    sink = NotificationSink(server)
    try:
        server.start()
        HUB.attach(STDIO_SESSION, sink, LOCAL)
        if index:
            indexer = start_background_indexing(ctx, reporter, stop)
        reason = ""
        while not reason:
            if signalled:
                reason = f"stopped by {signal.Signals(signalled[0]).name}"
            elif server.writer.broken.is_set():
                reason = "stdout closed"
            elif server.eof.is_set():
                reason = "stdin closed"
            else:
                server.eof.wait(0.1)
        stop.set()
        hurry = _Hurry(signalled)
        server.drain(drain_seconds, force=hurry)
        if indexer is not None:
            _join(indexer, indexer_stop_seconds, hurry, reporter)
        return reason
    finally:
        stop.set()
        server.end_listens()
        HUB.detach(STDIO_SESSION, sink)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Hurry:
    """Set by a signal that arrives once the shutdown has begun (a second
    SIGINT/SIGTERM, or any after EOF): stop waiting for calls and the indexer."""

    def __init__(self, signalled: list[int]) -> None:
        self.signalled, self.base = signalled, len(signalled)

    def is_set(self) -> bool:
        return len(self.signalled) > self.base


def _join(thread: BackgroundIndexer, timeout: float, force: _Hurry, reporter: Reporter) -> None:
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline and not force.is_set():
        thread.join(0.1)
    if thread.is_alive():
        reporter.warn(
            "the indexer did not stop in time; exiting anyway (documents are committed one at a "
            "time, so the index stays consistent; the next run picks up the rest)"
        )
