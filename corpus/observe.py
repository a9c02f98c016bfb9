"""Metric hooks the domain code calls, below every other project module.

This module imports nothing from the project, so ``corpus`` can count its
provider calls without reaching up into the site; ``dir2mcp_site/ops/metrics.py``
builds the ``/metrics`` exposition over the same prometheus_client registry
and takes :func:`never_raises` from here for its own hooks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps

from prometheus_client import Counter

log = logging.getLogger(__name__)

PROVIDER_CALLS = Counter(
    "dir2mcp_provider_calls",
    "Provider HTTP attempts by provider, operation and outcome: ok, http_<status>, transport.",
    ["provider", "operation", "outcome"],
)


def never_raises(fn: Callable[..., None]) -> Callable[..., None]:
    """A hook that logs its own failure instead of raising it into the call it observes."""

    @wraps(fn)
    def wrapper(*args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:  # metrics must never break the call they observe
            log.exception("metrics hook %s failed", fn.__name__)

    return wrapper


@never_raises
def observe_provider_call(provider: str, operation: str, outcome: str) -> None:
    """One HTTP attempt to a provider: ``ok``, ``http_<status>`` or ``transport``."""
    PROVIDER_CALLS.labels(provider, operation, outcome).inc()
