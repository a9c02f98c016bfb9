"""Indexing services: what `reindex`, `watch`, `up` and the admin call."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Unpack

from django.conf import settings

from corpus import adapter as query_adapter
from corpus.counters import Counters
from corpus.events import Reporter
from corpus.index.dense.embedding import check_models
from corpus.ingest.distributed import Dispatch
from corpus.ingest.lock import IndexLock
from corpus.ingest.pipeline import Indexer, IndexerOptions
from corpus.providers.base import Embedder
from kernel.config import Config
from kernel.state import StateDir


def walking_indexer(
    root: Path,
    state: StateDir,
    config: Config,
    **options: Unpack[IndexerOptions],
) -> Indexer:
    """The indexer for a walk of the whole tree: writing in this process, or
    handing the files to Celery workers when a broker is configured (docs/scaling.md)."""
    if not settings.CELERY_BROKER_URL:
        return Indexer(root, state, config, **options)
    # Celery with a broker only: without one no process loads it (tests/test_cli.py)
    from corpus.tasks import ingest_paths  # noqa: PLC0415

    return Indexer(root, state, config, step=Dispatch(send=ingest_paths.delay), **options)


def index_directory(
    root: Path,
    *,
    state: StateDir,
    config: Config,
    mode: str = "incremental",
    reporter: Reporter | None = None,
    stop: threading.Event | None = None,
    embedder: Embedder | None = None,
) -> Counters:
    """Index ``root`` once under the state directory's index lock.

    ``mode="full"`` re-reads every file; ``"incremental"`` skips files whose
    size and mtime (then content hash) are unchanged.
    """
    with IndexLock(state):
        if embedder is not None:
            check_models(
                embedder,
                state,
                reset=mode == "full",
                signature_weight=config.embed.signature_weight,
                vector_store=config.rag.vector_store,
                records_store=True,
                shard_vectors=config.rag.shard_vectors,
            )
            query_adapter.record(config.search.query_adapter)
        return walking_indexer(
            root, state, config, reporter=reporter, mode=mode, stop=stop, embedder=embedder
        ).run()


def refresh_paths(
    root: Path,
    rel_paths: Iterable[str],
    *,
    state: StateDir,
    config: Config,
    reporter: Reporter | None = None,
    embedder: Embedder | None = None,
) -> Counters:
    """Re-index only ``rel_paths``; the caller holds the index lock."""
    return Indexer(root, state, config, reporter=reporter, embedder=embedder).run_paths(rel_paths)
