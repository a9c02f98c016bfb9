"""Bound what a client can make ``up`` hold: request bodies, request heads
and idle connections.

daphne (through twisted.web) reads a whole request body into memory or a
temporary file before the ASGI application sees the request, so a size
check in the view runs too late: an unauthenticated client could make the
server buffer gigabytes. ``up`` serves with this request class instead,
which answers 413 from the declared ``Content-Length``, or as soon as a
chunked body passes the limit, and closes the connection.

twisted.web keeps a connection open for 12 hours by default, however
slowly its request head arrives (issue #23: 3,000 half-sent request lines
stayed open indefinitely). :class:`BoundedChannel` gives every request head
``server.header_timeout`` to arrive whole (408, then close) and closes a
connection on which nothing arrives for ``server.idle_timeout`` while the
server waits for the client (between keep-alive requests, or mid-body).
It also answers a request line or head past twisted's 16 KiB line limit
with 414 or 431 and a JSON body, where twisted drops the connection without
a word (or with a bare 400).

Each byte of a body resets the idle timer, so a client trickling request
bodies could hold a socket and a temporary file (a body over 100 kB) per
connection for as long as it liked, and with enough of them every file
descriptor of the process: every other client was reset. The factory keeps
at most ``server.max_connections`` open (by default half of what the
open-file limit leaves past :data:`RESERVED_FILES`); one more closes a
connection that was answered and only lingers to close (since session 29:
a client without the token kept every connection so), or makes the
oldest connection still waiting on its client (for a request head or the
rest of a body) make way, with a 503 it may retry, or is itself answered 503
when every connection has a request being served.

An answer that stays open (an SSE stream: a ``subscriptions/listen``, a
session's ``GET``, a call answered as events) keeps being written whether
or not its client reads it, and twisted buffers what the socket does not
take, without bound: a client that never reads its stream made the server
hold every notification sent to it for as long as the connection lasted
(session 28). Once the socket's buffer is full, a connection may leave at
most ``server.max_unread_mb`` of such an answer unread; past it the
connection is closed (a stream's client resumes it, or listens again).
That holds for a stream chunked (HTTP/1.1) and for one written as it comes
to an HTTP/1.0 client (uncounted until session 28's review). Answers of a
known length are written at once (a ``read_bytes`` of 1 MiB is about 1.4 MB
of JSON), and twisted holds what the socket does not take until the client
reads it or the idle timeout closes the connection: one client holding every
connection with such an answer never read made ``up`` hold hundreds of MB
(session 29). Every answer left unread past the socket's buffer, streamed
or not, counts against ``server.max_unread_total_mb`` across connections;
past it, the connections whose clients have left their answers unread the
longest are closed until the rest fit. A client that reads empties its
buffer and leaves the count, so only a budget filled by answers being read
at that very moment could reach it.

A deployment that runs ``daphne`` directly should set the same limits on
its reverse proxy (``client_max_body_size``, ``client_header_timeout``,
``keepalive_timeout``, ``large_client_header_buffers`` in nginx).
"""

from __future__ import annotations

import json
import logging
import resource
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import unquote

from daphne.http_protocol import HTTPFactory, WebRequest
from twisted.internet.base import DelayedCall
from twisted.internet.interfaces import IAddress
from twisted.internet.protocol import connectionDone
from twisted.python.failure import Failure

# twisted.web builds its HTTP/1.1 channel inside this wrapper (which also
# switches to HTTP/2 when negotiated); there is no public hook for the class.
from twisted.web.http import HTTPChannel, Request, _GenericHTTPChannelProtocol

from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import security_headers
from mcp_gateway.asgi_io import Response, Scope
from mcp_gateway.transport import MAX_BODY_BYTES

#: The gate's check of a request head (``route_gate.head_refusal``): its
#: refusal, or None. Set on the server by ``up``; none, nothing is checked early.
HeadCheck = Callable[[Scope], Response | None]

#: A head check that failed (throttled: ``head_check`` in settings.LOGGING).
head_check_log = logging.getLogger(f"{__name__}.head_check")
#: A connection closed for the answers its client leaves unread (throttled as
#: ``head_check``: a client with the token sets it off once a connection).
cut_log = logging.getLogger(f"{__name__}.cut")

#: After an error answer, how long input is still read (and dropped) so the
#: client sees the answer rather than a reset, before the connection closes.
LINGER_SECONDS = 2.0
#: File descriptors kept for everything but connections (the database and its
#: journal per thread, the vector files, logs, the indexer's pipes).
RESERVED_FILES = 256
#: Each connection may take two: its socket and a large body's temporary file.
FILES_PER_CONNECTION = 2
#: The fewest connections allowed, however low the open-file limit.
MIN_CONNECTIONS = 16

# Typing notes. daphne ships no types: its classes are Any, and subclassing
# them needs an ignore. twisted's methods are mostly unannotated; the
# untyped_calls_exclude in pyproject.toml lets calls that name them through
# their class pass (``HTTPChannel.dataReceived(self, data)``) but not
# ``super().dataReceived(data)`` or ``self.setTimeout(None)``, so the channel
# calls them through its one base class (the same method, MRO included;
# none of them is set per instance, unlike ``callLater``).
# twisted's zope interfaces declare their methods without ``self``, so mypy
# miscounts the arguments of ``ITransport.write``.


@dataclass(frozen=True)
class ConnectionLimits:
    """What ``up`` sets on its daphne server (``server.*`` config keys)."""

    header_timeout: float = 10.0  # seconds for a request head to arrive whole; 0 = none
    idle_timeout: float = 60.0  # seconds with nothing from the client while it is awaited; 0 = none
    mcp_path: str = "/mcp"  # answered in JSON-RPC shape; other paths in the REST envelope
    max_connections: int = 0  # open at once; 0 = from the open-file limit (connection_cap)
    max_body_buffer_mb: int = 256  # unfinished request bodies held at once, across connections
    max_unread_mb: int = 4  # of a streamed answer left unread past the socket's buffer, a connection
    max_unread_total_mb: int = 64  # of any answers left unread past the sockets' buffers, all connections


def connection_cap(configured: int) -> int:
    """How many connections may be open at once: ``configured``, or (0) what
    the process's open-file limit leaves past :data:`RESERVED_FILES`, at two
    descriptors a connection."""
    if configured:
        return configured
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(MIN_CONNECTIONS, (soft - RESERVED_FILES) // FILES_PER_CONNECTION)


def _answer(status: int, reason: str, payload: JsonObject, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer with a JSON body, after which the connection
    closes; with the security headers every answer carries."""
    body = json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return _closing(status, reason, headers, body, secure=False)  # no HSTS: no request to say https


def _closing(status: int, reason: str, headers: dict[str, str], body: bytes, *, secure: bool) -> bytes:
    """The bytes of an HTTP/1.1 answer after which the connection closes:
    ``headers`` and the security headers every answer carries."""
    security_headers.add_to(headers, secure=secure, no_store=True)
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"HTTP/1.1 {status} {reason}\r\n{lines}\r\n".encode("latin-1") + body


class BoundedRequest(WebRequest):  # type: ignore[misc]  # daphne ships no types: WebRequest is Any
    max_body = MAX_BODY_BYTES

    def __init__(self, *args: object, **kwargs: object) -> None:  # WebRequest's arguments, passed through
        super().__init__(*args, **kwargs)
        # twisted.web parses form bodies (and, for that, every POST's
        # Content-Type, through the email package) into ``args``, which
        # daphne never reads: about a tenth of the event loop's time per call.
        self._parsePOSTFormSubmission = False

    def gotLength(self, length: int | None) -> None:  # noqa: N802 (twisted's naming)
        self._received = 0
        self._refused = length is not None and length > self.max_body
        if self._refused:
            self._refuse()
            return
        channel = self.channel
        if length != 0 and isinstance(channel, BoundedChannel):  # a body follows (None: chunked)
            refusal = channel.checked_head(self)
            if refusal is not None:  # no token, a foreign Origin or Host: refused before any of the body
                self._refused = True
                self.requestHeaders.removeHeader(b"expect")  # no 100 Continue to send it anyway
                channel.refuse_before_body(refusal)
                return
        super().gotLength(length)

    def handleContentChunk(self, data: bytes) -> None:  # noqa: N802
        if self._refused:
            return
        self._received += len(data)
        channel = self.channel
        if isinstance(channel, BoundedChannel) and channel.open_connections is not None:
            channel.open_connections.received(channel, len(data))
            if channel.refused:  # it made way for other uploads: nothing more of it is kept
                self._refused = True
                return
        if self._received > self.max_body:
            self._refused = True
            self._refuse()
            return
        super().handleContentChunk(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:  # noqa: N802
        if not self._refused:
            super().requestReceived(command, path, version)

    def _refuse(self) -> None:
        """413 in the shape the request's path expects: JSON-RPC on the MCP
        endpoint, the REST envelope everywhere else (the REST mirror's
        ``{"error": {"code", "message", "retryable"}}``)."""
        self.requestHeaders.removeHeader(b"expect")  # twisted appended 100 Continue to the 413
        channel = self.channel
        message = f"request body over the {self.max_body}-byte limit"
        # The request line's target, as the channel parsed it (requestReceived, which
        # sets self.path, runs only once the whole body is in).
        target = getattr(channel, "_path", None)
        mcp_path = getattr(channel, "limits", ConnectionLimits()).mcp_path
        channel.transport.write(_head_refusal(413, "Payload Too Large", target, mcp_path, message))
        channel.transport.loseConnection()


def _head_refusal(status: int, reason: str, path: bytes | None, mcp_path: str, message: str) -> bytes:
    """An error answer to a request whose head was refused, in the shape its
    path expects: JSON-RPC on the MCP endpoint, the REST envelope elsewhere."""
    if _target(path) == mcp_path:
        payload = errors.rpc_refusal(errors.RPC_INVALID_REQUEST, message, {"code": errors.INVALID_RANGE})
    else:
        payload = errors.rest_error_body(errors.INVALID_RANGE, message, retryable=False)
    return _answer(status, reason, payload)


def _busy_refusal(path: bytes | None, mcp_path: str, message: str) -> bytes:
    """503 to a connection closed to make way for another (or refused at
    once): SERVER_BUSY, retryable, in the shape its path expects."""
    if _target(path) == mcp_path:
        data: JsonObject = {"code": errors.SERVER_BUSY, "retryable": True}
        payload = errors.rpc_refusal(errors.RPC_SERVER_BUSY, message, data)
    else:
        payload = errors.rest_error_body(errors.SERVER_BUSY, message, retryable=True)
    return _answer(503, "Service Unavailable", payload, retry_after=1)


def _whole(response: Response, secure: bool) -> bytes:
    """``response`` as a whole HTTP/1.1 answer after which the connection
    closes, with the headers every answer carries."""
    headers = {**response.headers, "Content-Length": str(len(response.body)), "Connection": "close"}
    reason = HTTPStatus(response.status).phrase
    return _closing(response.status, reason, headers, response.body, secure=secure)


def _address(address: IAddress) -> list[object] | None:
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    return None if host is None else [str(host), port]


def _peer(address: IAddress) -> str:
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    return f"{host}:{port}" if host is not None else str(address)


def _target(path: bytes | None) -> str:
    return (path or b"").split(b"?", 1)[0].decode("latin-1")


def _request_target(line: bytes) -> bytes | None:
    """The target of a (possibly cut) request line, if it got that far."""
    parts = line.split(b" ", 2)
    return parts[1] if len(parts) > 1 else None


class BoundedChannel(HTTPChannel):
    """twisted's HTTP/1.1 channel with a deadline for each request head and
    JSON answers to over-long request lines and heads."""

    limits = ConnectionLimits()
    open_connections: OpenConnections | None = None  # the factory's, set as the channel is built
    head_check: HeadCheck | None = None  # the server's, set as the channel is built
    _awaiting_head = True  # between requests, or reading a request head
    _awaiting_body = False  # the head is in; the body is not yet whole
    _head_clock: DelayedCall | None = None  # the current head's deadline
    _linger: DelayedCall | None = None  # closes a refused connection
    _refused = False  # an error was answered: input is dropped until close
    _socket_full = False  # the transport's buffer is over its size: the client is not taking what is sent
    _unread = 0  # bytes of streamed answers written since the buffer filled
    _held = 0  # bytes of any answer written since the buffer was last under its size
    _cut = False  # closed for leaving too much unread: nothing more is written
    # Set on each channel by twisted's HTTPFactory.buildProtocol: its reactor's
    # (so it is called through self, unlike the methods above and below).
    callLater: Callable[[float, Callable[[], object]], DelayedCall]

    def __init__(self) -> None:
        HTTPChannel.__init__(self)

    def connectionMade(self) -> None:  # noqa: N802 (twisted's naming)
        HTTPChannel.connectionMade(self)
        self._start_head_clock()
        if self.open_connections is not None:
            self.open_connections.opened(self)

    @property
    def refused(self) -> bool:
        """An error was answered on this connection: it only lingers to close."""
        return self._refused

    @property
    def waiting_on_client(self) -> bool:
        """Nothing of this connection is being served: it waits for a request
        head or the rest of a body (so closing it costs its client a retry)."""
        return (self._awaiting_head or self._awaiting_body) and not self._refused

    def make_way(self, message: str) -> None:
        """Answer 503 (retry) and close, for a connection that needs the room."""
        self._answer_and_close(_busy_refusal(getattr(self, "_path", None), self.limits.mcp_path, message))

    def stop_lingering(self) -> None:
        """Close now a connection that was answered and only lingers: its
        answer is written and its write side shut, so its client has it."""
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._linger = None
        HTTPChannel.loseConnection(self)

    def refuse_busy(self, message: str) -> None:
        """Answer 503 (retry) to a connection just opened, and close it: it
        has sent nothing yet, so nothing unread makes the close a reset."""
        self._refused = True
        self._stop_head_clock()
        transport = self.transport
        assert transport is not None  # called as the connection opens
        transport.write(_busy_refusal(None, self.limits.mcp_path, message))  # type: ignore[call-arg, misc]  # ITransport.write: see the typing notes
        HTTPChannel.loseConnection(self)

    def checked_head(self, request: Request) -> bytes | None:
        """The gate's refusal of ``request``, whose head alone has arrived,
        as a whole answer; None when it may go on. The scope is daphne's for
        the same head (its path unquoted, header names lower-cased, those
        with ``_`` left out). A check that raises (a bug) is logged and
        passes the request on: the gate checks it again once it is whole."""
        check = self.head_check
        target = getattr(self, "_path", None)  # twisted's parse of the request line
        command = getattr(self, "_command", None)
        transport = self.transport
        if check is None or target is None or command is None or transport is None:
            return None
        try:
            path = unquote(target.split(b"?", 1)[0].decode("ascii"))
        except UnicodeDecodeError:  # daphne answers 400 for it
            return None
        secure = HTTPChannel.isSecure(self)
        headers = [
            (name.lower(), value)
            for name, values in request.requestHeaders.getAllRawHeaders()
            if b"_" not in name
            for value in values
        ]
        scope: Scope = {
            "type": "http",
            "method": command.decode("latin-1"),
            "path": path,
            "root_path": "",
            "scheme": "https" if secure else "http",
            "headers": headers,
            "client": _address(transport.getPeer()),  # type: ignore[misc]  # see the typing notes
            "server": _address(transport.getHost()),  # type: ignore[misc]  # see the typing notes
        }
        try:
            refusal = check(scope)
        except Exception as failure:  # a bug: the gate decides, as it runs again on the whole request
            # Raised inside twisted's parse of the head, it would drop the
            # connection with no answer. Where it was raised, never its
            # message nor the scope: they may quote the headers (the token).
            frame = traceback.extract_tb(failure.__traceback__)[-1]
            head_check_log.warning(
                "the early check of a request head from %s failed (%s at %s:%s); left to the gate",
                _peer(transport.getPeer()),  # type: ignore[misc]  # see the typing notes
                type(failure).__name__,
                frame.filename.rsplit("/", 1)[-1],
                frame.lineno,
            )
            return None
        return None if refusal is None else _whole(refusal, secure)

    def refuse_before_body(self, answer: bytes) -> None:
        """Answer a request refused on its head, and close: its body is never read."""
        self._answer_and_close(answer)

    def dataReceived(self, data: bytes) -> None:  # noqa: N802
        if self._refused:
            return
        if self._awaiting_head:
            self._start_head_clock()
        HTTPChannel.dataReceived(self, data)

    def lineReceived(self, line: bytes) -> None:  # noqa: N802
        if self._refused:
            return
        if self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            self._too_long(line)
            return
        HTTPChannel.lineReceived(self, line)

    def lineLengthExceeded(self, line: bytes) -> None:  # noqa: N802
        self._too_long(line)

    def allHeadersReceived(self) -> None:  # noqa: N802
        self._awaiting_head = False
        self._awaiting_body = True
        self._stop_head_clock()
        HTTPChannel.allHeadersReceived(self)

    def allContentReceived(self) -> None:  # noqa: N802
        self._awaiting_body = False
        if self.open_connections is not None:
            self.open_connections.body_done(self)
        HTTPChannel.allContentReceived(self)

    def requestDone(self, request: Request) -> None:  # noqa: N802
        # Set first: a pipelined next request is parsed inside requestDone.
        self._awaiting_head = True
        HTTPChannel.requestDone(self, request)

    # -- answers left unread --

    def pauseProducing(self) -> None:  # noqa: N802
        # The transport calls this once its buffer passes its size (64 KiB):
        # the socket takes no more, the client is not reading.
        self._socket_full = True
        HTTPChannel.pauseProducing(self)

    def resumeProducing(self) -> None:  # noqa: N802
        # ...and this once its buffer is empty again: the client read it all.
        self._socket_full = False
        self._unread = 0
        self._held = 0
        if self.open_connections is not None:
            self.open_connections.unread(self, 0)
        HTTPChannel.resumeProducing(self)

    def writeSequence(self, iovec: list[bytes]) -> None:  # noqa: N802
        # A chunked answer's body: what streams (SSE) are written as. An
        # answer of known length goes through write().
        size = sum(len(part) for part in iovec)
        if not self._dropped(size, stream=True):
            HTTPChannel.writeSequence(self, iovec)
            self._handed(size)

    def write(self, data: bytes) -> None:
        # ...and so is a stream answered to an HTTP/1.0 client: not chunked,
        # written as it comes and ended by closing the connection (uncounted
        # until session 28's review: a silent HTTP/1.0 listen was never cut).
        request = self.requests[0] if self.requests else None
        unknown_length = (
            request is not None
            and not request.chunked
            and not request.responseHeaders.hasHeader(b"content-length")
        )
        if not self._dropped(len(data), stream=unknown_length):
            HTTPChannel.write(self, data)
            self._handed(len(data))

    def _dropped(self, size: int, *, stream: bool) -> bool:
        """Whether ``size`` more bytes of an answer are not to be written:
        the connection was cut, or (a stream) it is cut now."""
        if self._cut:
            return True
        if not self._socket_full:  # the transport's buffer is under its size: nothing is left unread
            self._held = 0
        return stream and self._left_unread(size)

    def _handed(self, size: int) -> None:
        """``size`` bytes were handed to the transport: while its buffer is
        full they are left unread, and count against every connection's
        ``server.max_unread_total_mb`` (which may cut this one)."""
        self._held += size
        if self._socket_full and self.open_connections is not None:
            self.open_connections.unread(self, self._held)

    def cut_unread(self, message: str) -> None:
        """Close this connection at once, dropping what it holds: its client
        leaves too much unread. Nothing more is written to it."""
        if self._cut:
            return
        self._cut = True
        if self.open_connections is not None:
            self.open_connections.unread(self, 0)
        transport = self.transport
        if transport is None:
            return
        cut_log.warning(
            "closed a connection from %s: %s",
            _peer(transport.getPeer()),  # type: ignore[misc]  # ITransport.getPeer: see the typing notes
            message,
        )
        abort = getattr(transport, "abortConnection", None)  # TCP and TLS have it; ITransport does not say so
        if abort is not None:
            abort()
        else:
            HTTPChannel.loseConnection(self)

    def _left_unread(self, size: int) -> bool:
        """Whether ``size`` more bytes would take the streamed answers this
        client leaves unread past ``server.max_unread_mb``; if so the
        connection is closed (at once, dropping what it holds)."""
        if not self._socket_full:
            return False
        self._unread += size
        if self._unread <= self.limits.max_unread_mb * 1024 * 1024:
            return False
        self.cut_unread(
            f"its client left over {self.limits.max_unread_mb} MiB of a streamed answer unread "
            "(server.max_unread_mb)"
        )
        return True

    def connectionLost(self, reason: Failure = connectionDone) -> None:  # noqa: N802
        if self.open_connections is not None:
            self.open_connections.closed(self)
        self._stop_head_clock()
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._linger = None
        HTTPChannel.connectionLost(self, reason)

    # -- the head deadline --

    def _start_head_clock(self) -> None:
        timeout = self.limits.header_timeout
        if timeout and self._head_clock is None and not self._refused:
            self._head_clock = self.callLater(timeout, self._head_too_slow)

    def _stop_head_clock(self) -> None:
        if self._head_clock is not None and self._head_clock.active():
            self._head_clock.cancel()
        self._head_clock = None

    def _head_too_slow(self) -> None:
        self._head_clock = None
        if self._refused or self.transport is None or self.transport.disconnecting:
            return
        self._refused = True
        seconds = f"{self.limits.header_timeout:g}"
        self.transport.write(  # type: ignore[call-arg, misc]  # ITransport.write: see the typing notes
            _head_refusal(
                408,
                "Request Timeout",
                None,
                self.limits.mcp_path,
                f"the request head did not arrive within {seconds} s (server.header_timeout)",
            )
        )
        # Everything the client sent has been read: close now, and abort
        # after twisted's abortTimeout if the client does not read the answer.
        HTTPChannel.timeoutConnection(self)

    # -- over-long request lines and heads --

    def _too_long(self, line: bytes) -> None:
        target: bytes | None
        if self._receivedHeaderSize == 0:  # nothing of this head was accepted: the request line
            status, reason = 414, "URI Too Long"
            message = f"the request line is over the {self.totalHeadersSize}-byte limit"
            target = _request_target(line)
        else:  # the request line was parsed: its target
            status, reason = 431, "Request Header Fields Too Large"
            message = f"the request head is over the {self.totalHeadersSize}-byte limit"
            target = getattr(self, "_path", None)
        self._answer_and_close(_head_refusal(status, reason, target, self.limits.mcp_path, message))

    def _answer_and_close(self, response: bytes) -> None:
        """Write ``response``, then close without resetting the connection:
        what the client is still sending is read and dropped, the write side
        is shut at once (plain TCP), and the connection closes when the
        client closes it or after LINGER_SECONDS."""
        self._refused = True
        HTTPChannel.clearLineBuffer(self)  # the rest of this head, and anything after it, is never parsed
        self._stop_head_clock()
        HTTPChannel.setTimeout(self, None)
        transport = self.transport
        assert transport is not None  # a line arrived or the connection opened, and it is not yet lost
        transport.write(response)  # type: ignore[call-arg, misc]  # ITransport.write: see the typing notes
        # Not under TLS: there the wrapper would pass this to the TCP socket
        # beneath it, cutting the TLS stream short of its close_notify.
        shut_write = None if HTTPChannel.isSecure(self) else getattr(transport, "loseWriteConnection", None)
        if shut_write is not None:
            shut_write()
        self._linger = self.callLater(LINGER_SECONDS, self.loseConnection)


class OpenConnections:
    """The factory's open connections, oldest first, kept to at most
    ``limit``; the bytes of the request bodies they are receiving, kept
    to at most ``body_budget`` (each a socket, and past 100 kB a temporary
    file, that an unauthenticated client fills); and the bytes of answers
    their clients leave unread past the sockets' buffers, kept to at most
    ``unread_budget``."""

    def __init__(self, limit: int, body_budget: int, unread_budget: int = 64 * 1024 * 1024) -> None:
        self.limit = limit
        self.body_budget = body_budget
        self.unread_budget = unread_budget
        self._open: dict[BoundedChannel, None] = {}  # insertion order: oldest first
        self._bodies: dict[BoundedChannel, int] = {}  # bytes received of an unfinished body
        self._body_bytes = 0
        # Bytes left unread by each connection whose socket is full; insertion
        # order: the one whose client has gone longest without emptying it first.
        self._unread: dict[BoundedChannel, int] = {}
        self._unread_bytes = 0

    def opened(self, channel: BoundedChannel) -> None:
        """Count ``channel``; past the limit, a connection that was answered
        and only lingers to close (LINGER_SECONDS) closes at once, or else
        the oldest connection waiting on its client makes way for it, or
        (none is) it is refused at once. One that made way stays counted
        while it lingers, and is the first to close for the next.

        Until session 29 a lingering connection was never one to close: a
        client without the token that kept opening requests refused on their
        head (401 before the body) held every connection, and every other
        client was answered 503."""
        self._open[channel] = None
        while len(self._open) > self.limit:
            answered = next((c for c in self._open if c is not channel and c.refused), None)
            if answered is None:
                break
            self._open.pop(answered)
            self.body_done(answered)
            answered.stop_lingering()
        if len(self._open) <= self.limit:
            return
        message = f"server busy: {self.limit} connections are open (server.max_connections); retry shortly"
        oldest_waiting = next((c for c in self._open if c is not channel and c.waiting_on_client), None)
        if oldest_waiting is not None:
            self.body_done(oldest_waiting)
            oldest_waiting.make_way(message)
        else:
            channel.refuse_busy(message)

    def received(self, channel: BoundedChannel, size: int) -> None:
        """``size`` more bytes of ``channel``'s request body; past the budget,
        the oldest unfinished uploads make way, ``channel`` included."""
        self._bodies[channel] = self._bodies.get(channel, 0) + size
        self._body_bytes += size
        message = (
            f"server busy: request bodies being received are over {self.body_budget} bytes "
            "(server.max_body_buffer_mb); retry shortly"
        )
        while self._body_bytes > self.body_budget:
            # The oldest connection, not the one whose body was read first,
            # and not skipping the one being read: the server reads the
            # sockets in no set order, and a client's bytes may wait in the
            # kernel until its younger neighbours' bodies are counted.
            oldest = next((c for c in self._open if c in self._bodies), channel)
            self.body_done(oldest)
            oldest.make_way(message)
            if oldest is channel:
                return

    def body_done(self, channel: BoundedChannel) -> None:
        """``channel``'s body is whole (handed to the application) or dropped."""
        self._body_bytes -= self._bodies.pop(channel, 0)

    def unread(self, channel: BoundedChannel, held: int) -> None:
        """``channel``'s client leaves ``held`` bytes of answers unread (0: it
        read them all); past the budget, the connections whose clients have
        gone longest without reading are closed until the rest fit. A client
        that reads leaves the count each time its socket's buffer empties,
        so it is behind every client that does not."""
        self._unread_bytes += held - self._unread.get(channel, 0)
        if not held:
            self._unread.pop(channel, None)
            return
        self._unread[channel] = held  # in place if it was counted: its client has still read nothing
        message = (
            f"the answers clients leave unread are over {self.unread_budget} bytes "
            "(server.max_unread_total_mb); this one had read nothing for the longest"
        )
        while self._unread_bytes > self.unread_budget and self._unread:
            longest = next(iter(self._unread))
            self._unread_bytes -= self._unread.pop(longest)
            longest.cut_unread(message)

    def closed(self, channel: BoundedChannel) -> None:
        self._open.pop(channel, None)
        self.body_done(channel)
        self.unread(channel, 0)

    def __len__(self) -> int:
        return len(self._open)


def _bounded_channel(factory: BoundedHTTPFactory) -> _GenericHTTPChannelProtocol:
    channel = BoundedChannel()
    channel.limits = factory.limits
    channel.open_connections = factory.open_connections
    channel.head_check = factory.head_check
    return _GenericHTTPChannelProtocol(channel)


class BoundedHTTPFactory(HTTPFactory):  # type: ignore[misc]  # daphne ships no types: HTTPFactory is Any
    protocol = _bounded_channel

    def __init__(self, server: object) -> None:  # daphne's Server
        super().__init__(server)
        self.limits = getattr(server, "limits", None) or ConnectionLimits()
        self.head_check: HeadCheck | None = getattr(server, "head_check", None)
        self.open_connections = OpenConnections(
            connection_cap(self.limits.max_connections),
            self.limits.max_body_buffer_mb * 1024 * 1024,
            self.limits.max_unread_total_mb * 1024 * 1024,
        )
        # twisted's idle timeout (12 hours by default): the connection closes
        # when nothing arrives for this long while a request is awaited.
        self.timeOut = self.limits.idle_timeout or None

    def buildProtocol(self, addr: IAddress) -> _GenericHTTPChannelProtocol:  # noqa: N802
        protocol: _GenericHTTPChannelProtocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedRequest
        return protocol
