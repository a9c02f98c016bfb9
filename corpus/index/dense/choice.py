"""Which embedder an index is served and extended with: the configured one,
or the one the index was built with (vectors never mix)."""

from __future__ import annotations

import logging

from corpus.events import Reporter
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
from corpus.status import recorded_embedder
from kernel.config import Config
from kernel.state import StateDir

logger = logging.getLogger(__name__)


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
