"""Metric hooks the code calls, below every other project module.

Hooks (``observe_*``) are cheap and never raise, so the transport, the tool
registry, the payment audit and the provider client can call them on every
request. This module imports nothing from the project, so none of them
reaches up into the site for it; ``dir2mcp_site/ops/metrics.py`` builds the
``/metrics`` exposition over the same prometheus_client registry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps

from prometheus_client import Counter, Histogram

log = logging.getLogger(__name__)

PROVIDER_CALLS = Counter(
    "dir2mcp_provider_calls",
    "Provider HTTP attempts by provider, operation and outcome: ok, http_<status>, transport.",
    ["provider", "operation", "outcome"],
)

#: anything else a client sends is counted as OTHER, so labels stay few
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

HTTP_REQUESTS = Counter(
    "dir2mcp_http_requests",
    "HTTP requests answered, by endpoint (mcp, site), method and status.",
    ["endpoint", "method", "status"],
)
TOOL_CALLS = Counter(
    "dir2mcp_tool_calls", "MCP tool calls by tool and outcome (ok, error).", ["tool", "outcome"]
)
TOOL_SECONDS = Histogram(
    "dir2mcp_tool_call_seconds",
    "Latency of MCP tool calls, by tool.",
    ["tool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
PAYMENTS = Counter(
    "dir2mcp_payments", "x402 payment outcomes (verified, settled, rejected, ...).", ["outcome"]
)


def never_raises(fn: Callable[..., None]) -> Callable[..., None]:
    """A hook that logs its own failure instead of raising it into the call it observes."""

    @wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> None:
        try:
            fn(*args, **kwargs)
        except Exception:  # metrics must never break the call they observe
            log.exception("metrics hook %s failed", fn.__name__)

    return wrapper


@never_raises
def observe_provider_call(provider: str, operation: str, outcome: str) -> None:
    """One HTTP attempt to a provider: ``ok``, ``http_<status>`` or ``transport``."""
    PROVIDER_CALLS.labels(provider, operation, outcome).inc()


@never_raises
def observe_request(method: str, status: int | str, *, endpoint: str = "mcp") -> None:
    """One HTTP request answered (``method`` is the HTTP method)."""
    method = method.upper()
    HTTP_REQUESTS.labels(endpoint, method if method in METHODS else "OTHER", str(status)).inc()


@never_raises
def observe_tool(name: str, seconds: float, is_error: bool) -> None:
    """One ``tools/call`` finished after ``seconds`` (the histogram first: a bad
    value then counts nowhere rather than in one metric and not the other)."""
    TOOL_SECONDS.labels(name).observe(seconds)
    TOOL_CALLS.labels(name, "error" if is_error else "ok").inc()


@never_raises
def observe_payment(outcome: str) -> None:
    """One payment decision or settlement result."""
    PAYMENTS.labels(outcome).inc()
