"""The serving preflight ``up`` and ``mcp_stdio`` share, and the indexer
that runs beside the server: the first pass, then live sync, taking over the
index lock when another process holds it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, Unpack

from django.db import connections

from corpus.events import Reporter
from corpus.index.dense.embedding import check_models
from corpus.ingest.lock import IndexLock
from corpus.management.base import Runtime
from corpus.providers.base import Embedder
from corpus.store import open_store, serving_copy, small_enough_to_check, uses_state_sqlite, writable
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir
from mcp_gateway import context, current, notify
from mcp_gateway.context import Context, ContextOptions
from mcp_gateway.indexer_process import (
    SAVED_WAIT_SECONDS,
    ChildLaunch,
    DenseRefresher,
    IndexerSupervisor,
    IndexerThread,
)
from mcp_gateway.preflight import check_keys

log = logging.getLogger(__name__)

#: How often a server whose index another process is writing retries the lock.
LOCK_RETRY_SECONDS = 2.0

# -- background indexing ------------------------------------------------------


class BackgroundIndexer(Protocol):
    """What :func:`start_background_indexing` returns: thread-like, ending after its stop."""

    def is_alive(self) -> bool: ...
    def join(self, timeout: float | None = None) -> None: ...


def serve_read_only_state(rt: Runtime) -> None:
    """``--no-index`` on a state directory this process may not write (a
    read-only file system, another user's directory): serve a private copy
    of its index (corpus.store.serving_copy), and say so. Anything else is
    left as it is (and an unwritable state directory then fails as before,
    with STATE_NOT_WRITABLE)."""
    state = rt.state
    if not (uses_state_sqlite(state) and state.meta_db.is_file() and not writable(state)):
        return
    rt.state = serving_copy(state)
    rt.reporter.warn(
        f"the state directory {state.path} is read-only: serving a private copy of its index "
        f"from {rt.state.path} (removed at exit; sessions and connection.json live there)",
        code="STATE_READ_ONLY",
    )


def serving_context(
    rt: Runtime,
    prepare_state: Callable[[Runtime], None],
    *,
    auth_spec: str,
    check_later: bool = False,
    **extra: Unpack[ContextOptions],
) -> Context:
    """The preflight ``up`` and ``mcp_stdio`` share, then the installed context.

    A missing provider key fails before any state is written (spec §2.5);
    then the store is opened, the state prepared, and one embedder made for
    the whole process (it embeds queries; with ``server.indexer: thread`` the
    indexer shares it and its dense index). An embedder other than the one
    that built the index is not used: the recorded one is kept
    (corpus.index.dense.choice.choose_embedder) until a full reindex switches.
    ``check_later``: a store too large to check at once
    (corpus.store.small_enough_to_check) is left for the caller to check
    once it serves; the context's ``store_checked`` says so.
    """
    check_keys(rt)
    embedder = rt.embedder()
    checked = not check_later or small_enough_to_check(rt.state)
    open_store(rt.state, reporter=rt.reporter, check=checked)
    prepare_state(rt)
    ctx = context.build(
        root=rt.root,
        state=rt.state,
        config=rt.config,
        auth_spec=auth_spec,
        models={"embedder": embedder},
        **extra,
    )
    ctx.store_checked = checked
    ctx.indexer_launch = ChildLaunch(rt.root, rt.state, rt.config_path, nice=rt.config.server.indexer_nice)
    ctx.gate = current.payment_gate(
        ctx, emit=lambda e: rt.reporter.event(e["event"], e.get("data"), level=e.get("level", "info"))
    )
    current.install(ctx)
    if embedder is not None:
        check_models(
            embedder,
            rt.state,
            signature_weight=rt.config.embed.signature_weight,
            vector_store=rt.config.rag.vector_store,
        )
    return ctx


def start_background_indexing(
    ctx: Context,
    reporter: Reporter,
    stop: threading.Event,
    *,
    ready: threading.Event | None = None,
    lock_retry: float = LOCK_RETRY_SECONDS,
    stop_wait: float = 30.0,
    settled: threading.Event | None = None,
) -> BackgroundIndexer:
    """Index ``ctx.root`` once (incrementally), then follow changes, until ``stop``;
    files a provider failed on for a passing reason (an outage, a timeout) are
    retried with backoff meanwhile (:mod:`corpus.ingest.watch`).

    With ``server.indexer: process`` (the default, when ``ctx.indexer_launch``
    says how) the work runs in a supervised child process at a lower CPU
    priority, and a thread here adds the vectors it stores to this process's
    dense indices (:mod:`mcp_gateway.indexer_process`): request handling never
    waits for extraction or embedding. With ``thread``, it runs in a daemon
    thread of this process with ``ctx.embedder`` (``IndexerThread``: the
    same embed-first requests and ETA, none of the isolation). Either way, when another
    process holds the index lock (another ``up``, a ``reindex``), the indexer
    says so once and the server serves what is on disk, retrying the lock
    until it frees up or ``stop`` is set.

    ``settled``: set once the server has answered; the dense refresher's
    first pass waits for it.

    Returns something thread-like (``is_alive``, ``join``) that ends after ``stop``.
    """
    launch = getattr(ctx, "indexer_launch", None)
    if ctx.config.server.indexer == "process" and launch is not None:
        # the child saves its index files in ctx.state: the refresher loads them
        # rather than build the code index again at a views pass's end
        refresher = DenseRefresher(ctx.state, stop, after=settled, follow_saves=SAVED_WAIT_SECONDS).start()
        supervisor = IndexerSupervisor(
            launch,
            notify.ChangeAnnouncer(reporter),  # changes become resource notifications
            stop,
            ready=ready,
            stop_wait=stop_wait,
            on_progress=refresher.wake,
        ).start()
        ctx.indexer, ctx.indexer_mode = supervisor, "process"
        notify.HUB.take_asks(supervisor.embed_first)  # other processes' clients ask too
        return supervisor
    thread = IndexerThread()
    ctx.indexer, ctx.indexer_mode = thread, "thread"
    notify.HUB.take_asks(thread.embed_first)
    return thread.start(
        _index_in_background,
        ctx,
        _JobReporter(reporter, thread),
        stop,
        ready,
        lock_retry,
    )


class _JobReporter(notify.ChangeAnnouncer):
    """The indexer's reporter under a server (its changes become resource
    notifications): everything but ``index_loaded``, which the server
    announced once before it started (each indexing job, every watch batch
    included, would announce it again); progress also feeds the thread's
    ``rate``, the embedding rate ``stats`` estimates the ETA from, and events
    its ``unwritten`` count."""

    def __init__(self, inner: Reporter, thread: IndexerThread) -> None:
        super().__init__(inner)
        self._thread = thread

    def progress(self, counters: dict[str, int], *, final: bool = False, running: bool = True) -> None:
        self._thread.rate.add(counters)
        super().progress(counters, final=final, running=running)

    def event(self, event: str, data: JsonObject | None = None, *, level: str = "info") -> None:
        self._thread.unwritten.note(event, data)
        if event != "index_loaded":
            super().event(event, data, level=level)


def _index_in_background(
    ctx: Context, reporter: Reporter, stop: threading.Event, ready: threading.Event | None, lock_retry: float
) -> None:
    try:
        index_until_stopped(
            ctx.root, ctx.state, ctx.config, ctx.embedder, reporter, stop, ready=ready, lock_retry=lock_retry
        )
    finally:
        connections.close_all()


def index_until_stopped(
    root: Path,
    state: StateDir,
    config: Config,
    embedder: Embedder | None,
    reporter: Reporter,
    stop: threading.Event,
    *,
    ready: threading.Event | None = None,
    lock_retry: float = LOCK_RETRY_SECONDS,
) -> None:
    """The indexer's life under a server (in its thread or its child
    process): index, then follow changes, until ``stop``; wait for the
    index lock while another process holds it; outlive any failure."""
    # The indexer's whole pipeline (~0.2 CPU-s of imports): only where it
    # runs, never in a server whose indexer is a child process.
    from corpus.ingest.watch import watch_directory

    waiting = False
    try:
        while not stop.is_set():
            if waiting and _lock_is_free(IndexLock(state)):
                waiting = False
                reporter.say("Index lock released by the other indexer; indexing now.")
            try:
                watch_directory(
                    root,
                    state=state,
                    config=config,
                    reporter=reporter,
                    stop=stop,
                    ready=ready,
                    embedder=embedder,
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


def _lock_is_free(lock: IndexLock) -> bool:
    try:
        lock.acquire()
    except errors.Dir2mcpError:
        return False
    lock.release()
    return True
