"""Indexing services: what `reindex`, `watch`, `up` and the admin call."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

from corpus.config import Config
from corpus.embedding import check_models
from corpus.events import Reporter
from corpus.ingest.distributed import Dispatch
from corpus.ingest.pipeline import Counters, Indexer
from corpus.providers.base import Embedder
from corpus.providers.registry import (
    KEPT,
    MISMATCH,
    SWITCHING,
    UNAVAILABLE,
    EmbedderChoice,
    SecretsLookup,
    build_embedder,
    plan_embedder,
)
from corpus.state import IndexLock, StateDir
from corpus.status import recorded_embedder

logger = logging.getLogger(__name__)


def walking_indexer(root: Path, state: StateDir, config: Config, **options) -> Indexer:
    """The indexer for a walk of the whole tree: writing in this process, or
    handing the files to Celery workers when a broker is configured (docs/scaling.md)."""
    step = Dispatch() if settings.CELERY_BROKER_URL else None
    return Indexer(root, state, config, step=step, **options)


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
                embedder, state, reset=mode == "full", signature_weight=config.embed.signature_weight
            )
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


# -- which embedder an index is served and extended with ----------------------


def choose_embedder(
    config: Config,
    state: StateDir,
    *,
    secrets_lookup: SecretsLookup,
    switch: bool = False,
) -> tuple[Embedder | None, EmbedderChoice]:
    """The embedder to index and search ``state`` with, and why.

    The configured one, unless the index was built with another: then that
    one is kept for new chunks and queries alike (vectors never mix), or,
    when it cannot be made here, none that works (search is lexical only).
    ``switch`` (a full reindex, which starts the vectors over) takes the
    configured one whatever the index holds.
    """
    plan = plan_embedder(
        config, secrets_lookup=secrets_lookup, recorded=recorded_embedder(state), switch=switch
    )
    return build_embedder(plan, config, secrets_lookup=secrets_lookup)


def announce_embedder(choice: EmbedderChoice, reporter: Reporter | None = None) -> None:
    """Say that the embedder in use is not simply the configured one: a log
    warning, and with ``reporter`` its NDJSON event (a human line for a switch)."""
    if choice.event is None:
        return
    if choice.status in (KEPT, UNAVAILABLE, MISMATCH):
        logger.warning("%s", choice.message)
    if reporter is None:
        return
    if choice.status == SWITCHING:
        reporter.say(choice.message)
    reporter.event(choice.event, choice.event_data(), level="info" if choice.status == SWITCHING else "warn")
