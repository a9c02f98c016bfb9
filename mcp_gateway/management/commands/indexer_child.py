"""``indexer_child``: the indexing process ``up`` and ``mcp_stdio`` supervise.

Internal: not for direct use (``watch`` is the command that indexes and
follows changes on its own). It indexes the root, then follows changes,
exactly as the in-process indexer did, and talks to its server over its
standard streams (mcp_gateway/indexer_process.py): reports out on stdout,
one JSON line per call; requests in on stdin. It stops at a safe point on
SIGINT/SIGTERM and when stdin closes (its server is gone).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
from collections.abc import Iterable
from typing import Any

from django.db import connections

from corpus.index.dense.embedding import embed_first
from corpus.ingest.pipeline import Indexer
from corpus.management.base import Dir2mcpCommand, Runtime
from corpus.providers.base import Embedder
from corpus.store import open_store
from kernel import errors
from mcp_gateway.background import index_until_stopped
from mcp_gateway.indexer_process import ForwardingReporter

log = logging.getLogger(__name__)


class Command(Dir2mcpCommand):
    help = "Internal: the indexing process that `up` and `mcp_stdio` start and supervise."

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        reporter = ForwardingReporter(sys.stdout)
        rt = self.runtime(options)
        rt.reporter = reporter
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        open_store(rt.state, reporter=reporter)
        embedder = rt.embedder(events=False)  # the server announced its choice
        requests = _Requests(rt, embedder, stop)
        threading.Thread(
            target=requests.read, args=(sys.stdin,), name="dir2mcp-requests", daemon=True
        ).start()
        index_until_stopped(rt.root, rt.state, rt.config, embedder, reporter, stop)
        requests.finish()


class _Requests:
    """What the server asks of the indexer over stdin, one JSON line each;
    EOF means the server is gone, and the indexer stops."""

    def __init__(self, rt: Runtime, embedder: Embedder | None, stop: threading.Event) -> None:
        self.rt = rt
        self.embedder = embedder
        self.stop = stop
        self._lock = threading.Lock()  # one request at a time, beside the watcher
        self._threads: list[threading.Thread] = []

    def read(self, stream: Iterable[str]) -> None:
        try:
            for line in stream:
                try:
                    request = json.loads(line)
                except ValueError:
                    log.warning("indexer: ignoring a request that is not JSON")
                    continue
                if isinstance(request, dict) and request.get("op") == "embed_first":
                    paths = [str(p) for p in request.get("paths") or []]
                    embed_first.add(paths, again=bool(request.get("again")))
                elif isinstance(request, dict) and request.get("op") == "reindex":
                    thread = threading.Thread(
                        target=self.reindex,
                        args=([str(p) for p in request.get("paths") or []], bool(request.get("full"))),
                        name="dir2mcp-admin-reindex",
                        daemon=True,
                    )
                    self._threads.append(thread)
                    thread.start()
        finally:
            self.stop.set()

    def reindex(self, paths: list[str], full: bool) -> None:
        """The admin's re-index of chosen documents; this process holds the lock."""
        rt = self.rt
        try:
            with self._lock:
                mode = "full" if full else "incremental"
                Indexer(
                    rt.root, rt.state, rt.config, mode=mode, embedder=self.embedder, reporter=rt.reporter
                ).run_paths(paths)
        except errors.Dir2mcpError as exc:
            rt.reporter.warn(f"admin re-index of {len(paths)} files not run: {exc}", code=exc.code)
        except Exception:  # a request thread has nobody to raise to
            log.exception("admin re-index of %d files failed", len(paths))
        finally:
            connections.close_all()

    def finish(self, timeout: float = 10.0) -> None:
        for thread in self._threads:
            thread.join(timeout)
