"""The serving preflight ``up`` and ``mcp_stdio`` share, and the indexer
that runs beside the server: the first pass, then live sync, taking over the
index lock when another process holds it."""

from __future__ import annotations

import logging
import threading

from corpus import errors
from corpus.events import Reporter

log = logging.getLogger(__name__)

#: How often a server whose index another process is writing retries the lock.
LOCK_RETRY_SECONDS = 2.0

# -- background indexing ------------------------------------------------------


def serving_context(rt, prepare_state, *, auth_spec: str, **extra):
    """The preflight ``up`` and ``mcp_stdio`` share, then the installed context.

    A missing provider key fails before any state is written (spec §2.5);
    then the store is opened, the state prepared, and one embedder made for
    the whole process, so the indexer and the tools share its dense index.
    An embedder other than the one that built the index is not used: the recorded one is kept
    (corpus.indexing.choose_embedder) until a full reindex switches.
    """
    from corpus.store import open_store
    from mcp_gateway import context
    from mcp_gateway.preflight import check_keys

    check_keys(rt)
    embedder = rt.embedder()
    open_store(rt.state, reporter=rt.reporter)
    prepare_state(rt)
    ctx = context.build(
        root=rt.root,
        state=rt.state,
        config=rt.config,
        auth_spec=auth_spec,
        _models={"embedder": embedder},
        **extra,
    )
    ctx.gate = context.payment_gate(
        ctx, emit=lambda e: rt.reporter.event(e["event"], e.get("data"), level=e.get("level", "info"))
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
    """Index ``ctx.root`` once (incrementally), then follow changes, until ``stop``;
    files a provider failed on for a passing reason (an outage, a timeout) are
    retried with backoff meanwhile (:mod:`corpus.ingest.watch`).

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
