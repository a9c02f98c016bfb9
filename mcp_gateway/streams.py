"""Answers that stay open (``subscriptions/listen`` and a session's
standalone ``GET /mcp`` stream): how many, and whose.

Each holds its connection for as long as its client likes, and ``up`` keeps
at most ``server.max_connections`` connections, never closing one whose
request is being answered (mcp_gateway/bounded.py). Before 2026-11-29 one
client holding the token opened as many streams as there were connections
(a session costs nothing, a subscription needs none), and every other client
was refused 503 until it let go (docs/security.md, "Hostile round,
2026-11-29"). Now streams are *admitted* (:func:`admit`):

* all of them together hold at most half of the connections
  (:func:`limits`), so the other half always serves requests;
* one client (its address and credential, :func:`ratelimit.client_key`, the
  same for both kinds) holds at most ``server.max_calls_per_client``.

One past either is refused at once: ``SERVER_BUSY``, retryable, with
``Retry-After``. A stream is counted when it is admitted, before anything
awaits (a burst of requests cannot all pass a check made before any of them
opened), and given back when its answer ends (:func:`release`, from the
answer's own ``finally``, sent or not). Counted on the event loop's thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel import errors
from kernel.config import Config
from mcp_gateway.bounded import connection_cap
from mcp_gateway.workers import give_back


@dataclass(frozen=True)
class Limits:
    total: int  # streams open at once in this process
    share: int  # streams one client may hold


def limits(config: Config) -> Limits:
    """Half of the connections ``up`` keeps (``server.max_connections``, or
    what the open-file limit allows), and a client's share of the call slots."""
    total = max(1, connection_cap(config.server.max_connections) // 2)
    return Limits(total, min(total, config.server.max_calls_per_client))


class Open:
    """Streams open in this process, in all and by client."""

    total = 0
    by_client: dict[str, int] = {}


def admit(bounds: Limits, client: str) -> None:
    """Count a stream for ``client``; ``SERVER_BUSY`` when the process or the
    client is at its limit. Give it back with :func:`release`."""
    if Open.total >= bounds.total:
        raise errors.Dir2mcpError(
            errors.SERVER_BUSY,
            f"server busy: {bounds.total} streams are open, half of the connections "
            "(server.max_connections); retry shortly",
        )
    held = Open.by_client.get(client, 0)
    if held >= bounds.share:
        raise errors.Dir2mcpError(
            errors.SERVER_BUSY,
            f"this client already has {held} streams open (server.max_calls_per_client); "
            "close one, or retry when one has ended",
        )
    Open.total += 1
    Open.by_client[client] = held + 1


def release(client: str) -> None:
    Open.total -= 1
    give_back(Open.by_client, client)
