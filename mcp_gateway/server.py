"""Serving the gateway: daphne in the foreground, indexing in the background.

``up`` calls :func:`serve`. It binds daphne (plain TCP or TLS) to the listen
address, and once the socket is listening it announces the real URL (the
port may have been 0) and starts :func:`start_background_indexing`, so the
server accepts requests while the corpus is still being read. SIGINT and
SIGTERM stop the reactor, then the indexer (it checks its stop event between
files and commits each document whole), and :func:`serve` returns.

:func:`start_background_indexing` is also what ``mcp_stdio`` runs.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import signal
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from corpus import errors
from corpus.events import Reporter
from corpus.state import StateDir, write_json

log = logging.getLogger(__name__)

TRANSPORT = "mcp_streamable_http"
PROTOCOL_VERSION = "2025-11-25"
SESSION_HEADER = "MCP-Session-Id"
#: How often a server whose index another process is writing retries the lock.
LOCK_RETRY_SECONDS = 2.0
#: How long shutdown waits for the indexer to reach a safe point.
STOP_WAIT_SECONDS = 30.0


# -- the listen address -----------------------------------------------------


@dataclass(frozen=True)
class ListenAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{_bracket(self.host)}:{self.port}"

    @property
    def wildcard(self) -> bool:
        return self.host in ("0.0.0.0", "::", "")

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_listen(value: str) -> ListenAddress:
    """``host:port``, ``[v6]:port``, ``:port`` (loopback) or a bare port."""
    text = (value or "").strip()
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\s]*):(\d+)|(\d+)", text)
    if not match:
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"--listen must be host:port (e.g. 127.0.0.1:0 or [::1]:8080), not {value!r}",
        )
    host = match.group(1) or match.group(3) or "127.0.0.1"
    port = int(match.group(2) or match.group(4) or match.group(5))
    if port > 65535:
        raise errors.Dir2mcpError(errors.CONFIG_INVALID, f"port {port} in --listen {value!r} is out of range")
    return ListenAddress(host, port)


def public_address(address: ListenAddress) -> ListenAddress:
    """``--public``: all interfaces instead of loopback; the port is kept."""
    if address.loopback:
        return ListenAddress("::" if ":" in address.host else "0.0.0.0", address.port)
    return address


def client_host(host: str) -> str:
    """The host a local client connects to (a wildcard bind answers on loopback)."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def endpoint_url(host: str, port: int, mcp_path: str, *, tls: bool) -> str:
    scheme = "https" if tls else "http"
    path = mcp_path if mcp_path.startswith("/") else f"/{mcp_path}"
    return f"{scheme}://{_bracket(client_host(host))}:{port}{path}"


# -- TLS ----------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    cert: Path
    key: Path
    chain: bool = False  # the cert file carries intermediates after the leaf


def check_tls(cert: str | os.PathLike | None, key: str | os.PathLike | None) -> TlsFiles | None:
    """Both files or neither; readable PEM, and the key must match the cert."""
    if not cert and not key:
        return None
    if not cert or not key:
        missing = "--tls-key" if cert else "--tls-cert"
        raise errors.Dir2mcpError(
            errors.TLS_CONFIG_INVALID,
            f"TLS needs both a certificate and a key; {missing} is missing",
            hint="Pass both --tls-cert and --tls-key (PEM files), or neither.",
        )
    cert_path, key_path = Path(cert), Path(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
        count = cert_path.read_bytes().count(b"-----BEGIN CERTIFICATE-----")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or str(exc)
        raise errors.Dir2mcpError(
            errors.TLS_CONFIG_INVALID,
            f"cannot use TLS certificate {cert_path} with key {key_path}: {reason}",
            hint="Both must be readable PEM files, and the key must belong to the certificate.",
        ) from None
    return TlsFiles(cert_path, key_path, chain=count > 1)


def endpoint_description(address: ListenAddress, tls: TlsFiles | None) -> str:
    """A twisted server endpoint string for daphne."""
    from twisted.internet.endpoints import quoteStringArgument

    interface = address.host.strip("[]").replace(":", r"\:")
    if tls is None:
        kind = "tcp6" if ":" in address.host else "tcp"
        return f"{kind}:port={address.port}:interface={interface}"
    text = (
        f"ssl:port={address.port}:interface={interface}"
        f":privateKey={quoteStringArgument(str(tls.key))}:certKey={quoteStringArgument(str(tls.cert))}"
    )
    if tls.chain:
        text += f":extraCertChain={quoteStringArgument(str(tls.cert))}"
    return text


# -- what clients are told ------------------------------------------------------


def token_placeholder(ctx) -> str:
    return {
        "secret.token": "<token-from-secret.token>",
        "env": "<token-from-env>",
        "file": "<token-from-file>",
    }.get(ctx.auth.source, "<token>")


def headers(ctx, placeholder: str = "<token>") -> dict[str, str]:
    out = {"MCP-Protocol-Version": PROTOCOL_VERSION}
    if ctx.auth.required:
        out["Authorization"] = f"Bearer {placeholder}"
    return out


def connection_data(ctx, url: str) -> dict:
    """``connection.data`` (spec §3.2): never the token itself."""
    data = {
        "transport": TRANSPORT,
        "url": url,
        "headers": headers(ctx),
        "token_source": ctx.auth.source,
    }
    if ctx.auth.source == "file":
        data["token_file"] = ctx.auth.token_file
    elif ctx.auth.source == "env":
        data["token_env"] = ctx.config.security.auth.token_env
    return data


def connection_document(ctx, url: str, address: ListenAddress) -> dict:
    """``connection.json`` (spec §4.3), plus where the token is and who serves."""
    doc = {
        "transport": TRANSPORT,
        "url": url,
        "headers": headers(ctx, token_placeholder(ctx)),
        "session": {
            "uses_mcp_session_id": True,
            "header_name": SESSION_HEADER,
            "assigned_on_initialize": True,
        },
        "token_source": ctx.auth.source,
    }
    if ctx.auth.source in ("file", "secret.token"):
        doc["token_file"] = ctx.auth.token_file
    elif ctx.auth.source == "env":
        doc["token_env"] = ctx.config.security.auth.token_env
    doc["listen"] = str(address)
    doc["pid"] = os.getpid()
    return doc


def write_connection_json(state: StateDir, document: dict) -> None:
    write_json(state.connection_json, document)


def auth_line(ctx, spec: str = "") -> str:
    """The human ``Auth:`` value: where the token is, never what it is."""
    auth = ctx.auth
    if not auth.required:
        return "none (no token required)"
    if auth.source == "env":
        return f"Bearer (source=env, from ${ctx.config.security.auth.token_env})"
    if auth.source == "file":
        origin = f"--auth {spec}" if spec.startswith("file:") else "security.auth.token_file"
        return f"Bearer (source=file, {auth.token_file}, from {origin})"
    return f"Bearer (source=secret.token, stored in {auth.token_file})"


def connection_block(ctx, url: str, spec: str = "") -> list[str]:
    """The §3.1 MCP endpoint block."""
    lines = ["MCP endpoint:", f"  URL:    {url}", f"  Auth:   {auth_line(ctx, spec)}", "  Headers:"]
    lines += [f"    {name}: {value}" for name, value in headers(ctx).items()]
    lines.append(f"    {SESSION_HEADER}: (assigned after initialize response)")
    return lines


# -- background indexing ------------------------------------------------------


def serving_context(rt, prepare_state, *, auth_spec: str, **extra):
    """The preflight ``up`` and ``mcp_stdio`` share, then the installed context.

    A missing provider key fails before any state is written (spec §2.5);
    then the store is opened, the state prepared, and one embedder made for
    the whole process, so the indexer and the tools share its dense index.
    An embedder other than the one that built the index fails with exit 5.
    """
    from corpus.store import open_store
    from mcp_gateway import context

    embedder = rt.embedder()
    open_store(rt.state)
    prepare_state(rt)
    ctx = context.build(
        root=rt.root,
        state=rt.state,
        config=rt.config,
        auth_spec=auth_spec,
        _models={"embedder": embedder},
        **extra,
    )
    context.install(ctx)
    if embedder is not None:
        from corpus.embedding import check_models

        check_models(embedder, rt.state)
    return ctx


def start_background_indexing(
    ctx,
    reporter: Reporter,
    stop: threading.Event,
    *,
    ready: threading.Event | None = None,
    lock_retry: float = LOCK_RETRY_SECONDS,
) -> threading.Thread:
    """Index ``ctx.root`` once (incrementally), then follow changes, until ``stop``.

    Runs in a daemon thread with ``ctx.embedder``, so the vectors it adds go
    into this process's dense index, the one the tools search. When another
    process holds the index lock (another ``up``, a ``reindex``), this one
    says so once and serves what is on disk, retrying the lock until it
    frees up or ``stop`` is set.
    """
    thread = threading.Thread(
        target=_index_in_background,
        args=(ctx, _JobReporter(reporter), stop, ready, lock_retry),
        name="dir2mcp-indexer",
        daemon=True,
    )
    thread.start()
    return thread


class _JobReporter:
    """The indexer's reporter under a server: everything but ``index_loaded``,
    which the server announced once before it started (each indexing job,
    every watch batch included, would announce it again)."""

    def __init__(self, inner: Reporter):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def event(self, event: str, data=None, *, level: str = "info") -> None:
        if event != "index_loaded":
            self._inner.event(event, data, level=level)


def _index_in_background(ctx, reporter, stop, ready, lock_retry) -> None:
    from django.db import connections

    from corpus.ingest.watch import watch_directory
    from corpus.state import IndexLock

    waiting = False
    try:
        while not stop.is_set():
            if waiting and _lock_is_free(IndexLock(ctx.state)):
                waiting = False
                reporter.say("Index lock released by the other indexer; indexing now.")
            try:
                watch_directory(
                    ctx.root,
                    state=ctx.state,
                    config=ctx.config,
                    reporter=reporter,
                    stop=stop,
                    ready=ready,
                    embedder=ctx.embedder,
                )
                return
            except errors.Dir2mcpError as exc:
                if exc.code != errors.INDEX_LOCKED:
                    reporter.warn(f"indexing stopped: {exc}; still serving the index as it is", code=exc.code)
                    return
                if not waiting:
                    waiting = True
                    reporter.warn(
                        f"{exc.message}; serving the existing index read-only until the lock is free",
                        code=exc.code,
                    )
                stop.wait(lock_retry)
    except Exception as exc:  # the server outlives its indexer
        log.exception("background indexing failed")
        reporter.warn(f"indexing stopped: {type(exc).__name__}: {exc}; still serving the index as it is")
    finally:
        connections.close_all()


def _lock_is_free(lock) -> bool:
    try:
        lock.acquire()
    except errors.Dir2mcpError:
        return False
    lock.release()
    return True


# -- daphne -------------------------------------------------------------------


def asgi_application():
    """The project's ASGI application (``settings.ASGI_APPLICATION``)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    return import_string(settings.ASGI_APPLICATION)


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
    elif _bracket(address.host) not in hosts and address.host not in hosts:
        hosts.append(_bracket(address.host))
    settings.ALLOWED_HOSTS = hosts


@dataclass
class Listening:
    """What :func:`serve` hands its ``announce`` callback."""

    address: ListenAddress  # as bound, with the real port
    url: str


def serve(
    ctx,
    address: ListenAddress,
    *,
    reporter: Reporter,
    tls: TlsFiles | None = None,
    announce: Callable[[Listening], None] | None = None,
    index: bool = True,
    stop_wait: float = STOP_WAIT_SECONDS,
) -> None:
    """Serve ``ctx`` on ``address`` until SIGINT/SIGTERM.

    Raises BIND_FAILED when the address cannot be bound (nothing has been
    indexed by then). ``announce`` runs once the socket listens, before the
    background indexer starts.
    """
    Gateway(
        ctx, address, reporter=reporter, tls=tls, announce=announce, index=index, stop_wait=stop_wait
    ).run()


class Gateway:
    """One daphne server plus its background indexer, stopped by signals."""

    def __init__(
        self,
        ctx,
        address: ListenAddress,
        *,
        reporter: Reporter,
        tls: TlsFiles | None = None,
        announce: Callable[[Listening], None] | None = None,
        index: bool = True,
        stop_wait: float = STOP_WAIT_SECONDS,
    ):
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
        self._indexer: threading.Thread | None = None
        self._server = None

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

    def _serve(self) -> None:
        server_class = _server_class()
        self._server = server = server_class(
            application=asgi_application(),
            endpoints=[endpoint_description(self.address, self.tls)],
            signal_handlers=False,
            ready_callable=self._ready,
            verbosity=0,
        )
        try:
            server.run()
        except Exception as exc:
            if self.tls is not None and _looks_like_tls_error(exc):
                raise errors.Dir2mcpError(
                    errors.TLS_CONFIG_INVALID, f"cannot start TLS with {self.tls.cert}: {exc}"
                ) from None
            raise
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
            self._indexer = start_background_indexing(self.ctx, self.reporter, self.stop)

    # -- stopping --

    def _on_signal(self, signum, frame) -> None:
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
            reactor.stop()
        except ReactorNotRunning:
            pass

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


def _server_class():
    # Importing daphne.server installs the asyncio reactor: only when serving.
    import daphne.server
    from daphne.server import Server

    from mcp_gateway.bounded import BoundedHTTPFactory

    # Server.run builds its factory from this module-level name; ours refuses
    # oversized bodies before they are buffered (mcp_gateway/bounded.py).
    daphne.server.HTTPFactory = BoundedHTTPFactory

    class _Server(Server):
        listen_failure = None

        def listen_error(self, failure):
            # Daphne logs and stops; keep the failure so `up` can exit 4.
            self.listen_failure = failure
            self.stop()

    return _Server


def _listen_reason(failure) -> str:
    exc = failure.value
    socket_error = getattr(exc, "socketError", None)
    if isinstance(socket_error, OSError) and socket_error.strerror:
        return socket_error.strerror
    return str(socket_error or failure.getErrorMessage())


def _looks_like_tls_error(exc: Exception) -> bool:
    return type(exc).__module__.startswith(("OpenSSL", "twisted.internet.ssl", "ssl")) or isinstance(
        exc, ValueError | OSError
    )
