"""Serving the gateway: daphne in the foreground, indexing in the background.

``up`` calls :func:`serve`. It binds daphne (plain TCP or TLS) to the listen
address, and once the socket is listening it announces the real URL (the
port may have been 0) and starts the background indexer, so the
server accepts requests while the corpus is still being read. SIGINT and
SIGTERM stop the reactor, then the indexer (it checks its stop event between
files and commits each document whole), and :func:`serve` returns; a process
still alive ``EXIT_GRACE_SECONDS`` later (call threads stuck on a provider or
a disk, which Python would wait for at exit) exits hard.

The listen address and TLS live in ``listen.py``, what clients are told in
``connection.py``, the preflight and the indexer in ``background.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, Unpack

from django.db import connection

from corpus import patterns
from corpus.events import Reporter
from corpus.store import check_integrity
from kernel import errors
from mcp_gateway import workers
from mcp_gateway.asgi_io import App, Receive, Scope, Send
from mcp_gateway.background import BackgroundIndexer, start_background_indexing
from mcp_gateway.context import Context
from mcp_gateway.listen import ListenAddress, TlsFiles, bracket, endpoint_description, endpoint_url

if TYPE_CHECKING:  # bounded.py and twisted (~130 ms): imported only when serving (see _server_class)
    from twisted.python.failure import Failure

    from mcp_gateway.bounded import ConnectionLimits

log = logging.getLogger(__name__)

#: Work that need not precede the first answer (the URLconf, a large
#: index's integrity check, the dense refresher's first pass) starts once a
#: request is answered, or this long after the server listens if none is.
SETTLE_AFTER_SECONDS = 2.0
#: How long shutdown waits for the indexer to reach a safe point.
STOP_WAIT_SECONDS = 30.0
#: How long a stopped server may take to exit before it exits hard: a call
#: thread cannot be killed, and the interpreter would wait for it at exit.
EXIT_GRACE_SECONDS = 3.0


# -- daphne -------------------------------------------------------------------


def asgi_application() -> App:
    """The project's ASGI application (``settings.ASGI_APPLICATION``)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    application: App = import_string(settings.ASGI_APPLICATION)
    return application


def _load_urls() -> None:
    """Load the URLconf (REST mirror, admin) once serving has begun, so
    ``/mcp``, which does not need it, answers before it is ready and the
    first REST or admin request does not pay for the imports."""
    from django.urls import get_resolver

    try:
        get_resolver().url_patterns  # noqa: B018  (the property imports every route)
    except Exception:  # a broken route shows on its own request, with its error
        log.exception("loading the URLconf failed")


def _after_first_answer(app: App, then: Callable[[], None]) -> App:
    """``app``, calling ``then`` when its first HTTP request is answered
    (on the event loop's thread; ``then`` may be called again by others)."""
    answered = False

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal answered
        try:
            await app(scope, receive, send)
        finally:
            if not answered and scope["type"] == "http":
                answered = True
                then()

    return wrapped


def allow_hosts(address: ListenAddress, *, public: bool) -> None:
    """Let Django accept the Host clients will send.

    Loopback binds keep the default allowlist (the DNS-rebinding defence);
    ``--public`` or a wildcard bind accepts any Host, a specific address adds
    itself. ``DJANGO_ALLOWED_HOSTS`` in the environment always wins.
    """
    from django.conf import settings

    if os.environ.get("DJANGO_ALLOWED_HOSTS"):
        return
    hosts = list(settings.ALLOWED_HOSTS)
    if public or address.wildcard:
        hosts = ["*"]
    elif bracket(address.host) not in hosts and address.host not in hosts:
        hosts.append(bracket(address.host))
    settings.ALLOWED_HOSTS = hosts


def secure_cookies() -> None:
    """Session and CSRF cookies only over https: ``up --tls-cert`` serves
    nothing else, so a cookie it sets must never travel in clear text.
    (Strict-Transport-Security follows from the https scheme by itself:
    ``mcp_gateway/security_headers.py``.)"""
    from django.conf import settings

    settings.SESSION_COOKIE_SECURE = True
    settings.CSRF_COOKIE_SECURE = True


@dataclass
class Listening:
    """What :func:`serve` hands its ``announce`` callback."""

    address: ListenAddress  # as bound, with the real port
    url: str


class GatewayOptions(TypedDict):
    """:class:`Gateway`'s keyword arguments, as :func:`serve` passes them on."""

    reporter: Reporter
    tls: NotRequired[TlsFiles | None]
    announce: NotRequired[Callable[[Listening], None] | None]
    index: NotRequired[bool]
    stop_wait: NotRequired[float]


def serve(ctx: Context, address: ListenAddress, **options: Unpack[GatewayOptions]) -> None:
    """Serve ``ctx`` on ``address`` until SIGINT/SIGTERM (``options``:
    :class:`Gateway`'s).

    Raises BIND_FAILED when the address cannot be bound (nothing has been
    indexed by then). ``announce`` runs once the socket listens, before the
    background indexer starts.
    """
    if options.get("tls") is not None:
        secure_cookies()
    Gateway(ctx, address, **options).run()


class Gateway:
    """One daphne server plus its background indexer, stopped by signals."""

    def __init__(
        self,
        ctx: Context,
        address: ListenAddress,
        *,
        reporter: Reporter,
        tls: TlsFiles | None = None,
        announce: Callable[[Listening], None] | None = None,
        index: bool = True,
        stop_wait: float = STOP_WAIT_SECONDS,
    ) -> None:
        self.ctx = ctx
        self.address = address
        self.reporter = reporter
        self.tls = tls
        self.announce = announce
        self.index = index
        self.stop_wait = stop_wait
        self.stop = threading.Event()  # the indexer's stop
        self._stopping = threading.Event()  # a signal arrived
        self._force = threading.Event()  # a second signal: stop waiting
        self._indexer: BackgroundIndexer | None = None
        self._server: Any = None  # Any: a daphne Server (daphne ships no types)
        self._fatal: errors.Dir2mcpError | None = None  # found while serving: stops it, ends `up`
        self.settled = threading.Event()  # see _settle

    # -- lifecycle --

    def run(self) -> None:
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._serve()
        finally:
            self.stop.set()
            self._join_indexer()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if self._stopping.is_set():
                self._exit_within(EXIT_GRACE_SECONDS)

    def _serve(self) -> None:
        server_class = _server_class()
        self._server = server = server_class(
            application=_after_first_answer(asgi_application(), self._settle),
            endpoints=[endpoint_description(self.address, self.tls)],
            signal_handlers=False,
            ready_callable=self._ready,
            verbosity=0,
        )
        server.limits = _connection_limits(self.ctx)  # read by its HTTP factory (mcp_gateway/bounded.py)
        # The gate's checks of a request head, before its body is read (the
        # application, and so the gate, is imported just above).
        from mcp_gateway.route_gate import head_refusal

        server.head_check = head_refusal
        try:
            server.run()
        except Exception as exc:
            if self.tls is not None and _looks_like_tls_error(exc):
                raise errors.Dir2mcpError(
                    errors.TLS_CONFIG_INVALID, f"cannot start TLS with {self.tls.cert}: {exc}"
                ) from None
            raise
        if self._fatal is not None:
            raise self._fatal
        if server.listen_failure is not None:
            raise errors.Dir2mcpError(
                errors.BIND_FAILED,
                f"cannot listen on {self.address}: {_listen_reason(server.listen_failure)}",
                hint="Choose another address or port with --listen (port 0 picks a free one).",
            )

    def _ready(self) -> None:
        """Daphne has bound the socket; the reactor starts right after this."""
        from twisted.internet import reactor

        host, port = self._server.listening_addresses[0]
        bound = ListenAddress(host, port)
        listening = Listening(bound, endpoint_url(host, port, self.ctx.mcp_path, tls=self.tls is not None))
        reactor.callWhenRunning(self._stop_if_asked)
        if self.announce is not None:
            self.announce(listening)
        if self.index and not self._stopping.is_set():
            self._indexer = start_background_indexing(
                self.ctx, self.reporter, self.stop, stop_wait=self.stop_wait, settled=self.settled
            )
        reactor.callLater(SETTLE_AFTER_SECONDS, self._settle)  # type: ignore[arg-type]  # twisted types IReactorTime.callLater as a zope interface method, without self

    def _settle(self) -> None:
        """Start what serving does not wait for: loading the URLconf,
        checking a large index, the dense refresher's first pass. Called
        once the first request is answered (:func:`_after_first_answer`),
        or ``SETTLE_AFTER_SECONDS`` after listening if none came, so none
        of it competes with that request."""
        if self.settled.is_set():
            return
        self.settled.set()
        if not self.ctx.store_checked:
            threading.Thread(target=self._finish_store_check, name="dir2mcp-check", daemon=True).start()
        threading.Thread(target=_load_urls, name="dir2mcp-urls", daemon=True).start()

    def _finish_store_check(self) -> None:
        """The integrity check ``up`` left for later on a large index:
        damage stops the server with STORE_CORRUPT (exit 5), as it stops
        ``up`` before it listens on a small one. Meanwhile queries that meet
        damage answer STORE_CORRUPT (corpus/store_faults.py)."""
        try:
            check_integrity(self.ctx.state)
        except errors.Dir2mcpError as exc:
            self._fatal = exc
            self.stop.set()
            from twisted.internet import reactor  # the one daphne installed (see _server_class)

            reactor.callFromThread(self._stop_reactor)
        except Exception:  # an unreadable file, a closed database: queries report their own
            log.exception("checking the index database failed")
        finally:
            connection.close()

    # -- stopping --

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping.is_set():
            self._force.set()
            return
        self._stopping.set()
        self.stop.set()
        from twisted.internet import reactor

        if reactor.running:
            reactor.callFromThread(self._stop_reactor)

    def _stop_if_asked(self) -> None:
        if self._stopping.is_set():
            self._stop_reactor()

    @staticmethod
    def _stop_reactor() -> None:
        from twisted.internet import reactor
        from twisted.internet.error import ReactorNotRunning

        try:
            reactor.stop()  # type: ignore[misc]  # twisted types IReactorCore.stop as a zope interface method, without self
        except ReactorNotRunning:
            pass

    def _exit_within(self, grace: float) -> None:
        """End the process ``grace`` seconds from now if it is still alive.

        Serving has stopped and the indexer has reached a safe point; what is
        left are call threads, which may be stuck on a slow disk or provider
        (issue #34: `up` said "Stopped." and lived on for 75 s). Python waits
        for every pool thread at exit and no thread can be killed, so a daemon
        timer exits hard instead; the index is consistent (documents are
        committed whole) and calls only read.
        """

        def hard_exit() -> None:
            running = workers.Slots.taken
            self.reporter.warn(f"exiting without waiting for {running} call(s) still running")
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            patterns.stop_worker()  # atexit does not run: a worker mid-compile would outlive us
            os._exit(errors.EXIT_OK)

        timer = threading.Timer(grace, hard_exit)
        timer.daemon = True
        timer.start()

    def _join_indexer(self) -> None:
        thread = self._indexer
        if thread is None:
            return
        waited = 0.0
        while thread.is_alive() and waited < self.stop_wait and not self._force.is_set():
            thread.join(0.2)
            waited += 0.2
        if thread.is_alive():
            self.reporter.warn(
                "the indexer did not stop in time; exiting anyway (documents are committed one at a "
                "time, so the index stays consistent; the next run picks up the rest)"
            )


def _server_class() -> type[Any]:  # Any: daphne's Server (daphne ships no types)
    # Importing daphne.server installs the asyncio reactor: only when serving.
    import daphne.server
    from daphne.server import Server

    # bounded.py imports daphne and twisted.web (~55 ms, measured): only when serving
    from mcp_gateway.bounded import BoundedHTTPFactory

    # Server.run builds its factory from this module-level name; ours refuses
    # oversized bodies before they are buffered (mcp_gateway/bounded.py).
    daphne.server.HTTPFactory = BoundedHTTPFactory

    class _Server(Server):  # type: ignore[misc]  # daphne ships no types: its Server is Any
        listen_failure: Failure | None = None

        def listen_error(self, failure: Failure) -> None:
            # Daphne logs and stops; keep the failure so `up` can exit 4.
            self.listen_failure = failure
            self.stop()

    return _Server


def _connection_limits(ctx: Context) -> ConnectionLimits:
    # Imported here, as in _server_class: bounded.py imports daphne.
    from mcp_gateway.bounded import ConnectionLimits

    settings = ctx.config.server
    return ConnectionLimits(
        header_timeout=settings.header_timeout,
        idle_timeout=settings.idle_timeout,
        mcp_path=ctx.mcp_path,
        max_connections=settings.max_connections,
        max_body_buffer_mb=settings.max_body_buffer_mb,
        max_unread_mb=settings.max_unread_mb,
        max_unread_total_mb=settings.max_unread_total_mb,
    )


def _listen_reason(failure: Failure) -> str:
    exc = failure.value
    socket_error = getattr(exc, "socketError", None)
    if isinstance(socket_error, OSError) and socket_error.strerror:
        return socket_error.strerror
    return str(socket_error or failure.getErrorMessage())


def _looks_like_tls_error(exc: Exception) -> bool:
    return type(exc).__module__.startswith(("OpenSSL", "twisted.internet.ssl", "ssl")) or isinstance(
        exc, ValueError | OSError
    )
