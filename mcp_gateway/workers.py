"""Where calls that do work run: threads of their own, never the event loop's
default pool, admitted per client and awaited under a deadline.

Everything cheap a request needs (``ping``, ``tools/list``,
``resources/list``, the session lookup, the REST mirror's edge) runs
in the loop's default executor, which is small (``min(32, CPUs + 4)``
threads: six on a two-CPU machine); what writes the database
(``initialize``, DELETE, a session's touch) has a lane of its own
(mcp_gateway/api.py: ``_in_writer``), since a write may wait on SQLite's
lock. What reads files, searches or calls a provider may take long: run
there, six slow calls would starve every later request while ``/healthz``
still said ok (issue #34). So every such call,
MCP and REST alike (``tools/call``, ``resources/read``, ``prompts/get``,
``completion/complete``, every REST tool and resource route), is *admitted*
first (:func:`admit`):

* it takes one of ``server.max_concurrent_calls`` slots, and runs in a pool
  exactly that wide, so it never queues behind another;
* one client (:class:`Client`: an MCP session; a call without one, on the
  REST mirror or a stateless 2026-07-28 request, is its host's) holds at
  most ``server.max_calls_per_client`` of them, so no client can take every
  slot;
* one host (an address and credential, whatever the surface, session or
  spelling of its requests) holds at most every slot but one client's share
  (:attr:`Bounds.host_share`), so the sessions of one host never take every
  slot either (until session 22 each session was a client and nothing more:
  a host that opened ``max_concurrent_calls / max_calls_per_client``
  sessions held every slot, and calls without a session had a share per
  surface);
* one past any limit is refused at once (``SERVER_BUSY``, retryable).

The request then waits at most ``server.call_timeout`` (:func:`finish`).
Past it the client is answered ``DEADLINE_EXCEEDED``, the call's stop event
is set (the handlers check it between steps), and the call, still holding its
slot until its thread returns, is counted as overdue: ``/healthz`` then says
degraded. A thread cannot be killed; it is abandoned, and ``up`` exits
without waiting for it (mcp_gateway/server.py).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from asgiref.sync import sync_to_async

from corpus import patterns
from kernel import errors
from kernel.config import Config
from kernel.jsontypes import JsonObject
from mcp_gateway import ratelimit

_R = TypeVar("_R")
_A = TypeVar("_A")  # the result of a future that finish waits alongside


@dataclass(frozen=True)
class Bounds:
    """The ``server.*`` limits a call is admitted and awaited under."""

    limit: int  # max_concurrent_calls: slots in the process
    share: int  # max_calls_per_client: slots one client may hold
    deadline: float  # call_timeout, seconds; 0 = none

    @classmethod
    def of(cls, config: Config, *, paid: bool = False) -> Bounds:
        """The configured bounds; a paid call (x402) has no deadline: its
        answer carries the settlement, which must not be settled behind a
        DEADLINE_EXCEEDED its client was given."""
        server = config.server
        deadline = 0.0 if paid else server.call_timeout
        return cls(server.max_concurrent_calls, server.max_calls_per_client, deadline)

    @property
    def host_share(self) -> int:
        """Slots one host may hold over all its clients: every slot but one
        client's share, so another host always finds a share free unless
        other hosts hold it (all of them when one client may hold them all)."""
        return max(self.share, self.limit - self.share)


@dataclass(frozen=True)
class Client:
    """Who a call is admitted as: its ``host`` (address and credential,
    :func:`ratelimit.client_key`, one for the MCP endpoint and the REST
    mirror) and, within it, the ``caller``: an MCP session, or the host
    itself for a call that names none (a host's REST and stateless calls
    cannot be told apart, so they share one share)."""

    host: str
    caller: str


def client_of(peer: str, real_ip: str | None, token: str | None, session: str | None = None) -> Client:
    """The :class:`Client` of a request from ``peer`` (``real_ip``: its
    ``X-Real-IP`` header), let in with ``token``, in ``session`` if it names one."""
    host = ratelimit.client_key("calls", peer, real_ip, token)
    return Client(host, session or host)


class Refused(errors.Dir2mcpError):
    """A call not admitted (``SERVER_BUSY``): no slot free, or its client's share taken."""


class Overdue(errors.Dir2mcpError):
    """A call not finished within its deadline (``DEADLINE_EXCEEDED``)."""


class Slots:
    """Calls running in this process, in all and by client.

    A call holds its slot until its worker thread returns, even when the
    client cancelled, hung up or was answered past the deadline, so the
    limits bound real work. Taken and released on the event loop's thread;
    ``/healthz`` only reads.
    """

    taken = 0
    limit: int | None = None  # the limit last asked for: None until the first call
    by_client: dict[str, int] = {}  # by Client.caller
    by_host: dict[str, int] = {}  # by Client.host
    overdue = 0  # calls still running past their deadline


def admit(bounds: Bounds, client: Client) -> None:
    """Take a slot for ``client``; :class:`Refused` (``SERVER_BUSY``) when
    none is free, or the client or its host already holds its share.
    Release it with :func:`release`."""
    Slots.limit = bounds.limit
    if Slots.taken >= bounds.limit:
        raise Refused(errors.SERVER_BUSY, errors.server_busy(bounds.limit).message)
    held = Slots.by_client.get(client.caller, 0)
    if held >= bounds.share:
        raise Refused(
            errors.SERVER_BUSY,
            f"this client already has {held} calls running (server.max_calls_per_client); "
            "retry when one has finished",
        )
    by_host = Slots.by_host.get(client.host, 0)
    if by_host >= bounds.host_share:
        raise Refused(
            errors.SERVER_BUSY,
            f"this address already has {by_host} calls running over its sessions (all of "
            "server.max_concurrent_calls but one server.max_calls_per_client); retry when one has finished",
        )
    Slots.taken += 1
    Slots.by_client[client.caller] = held + 1
    Slots.by_host[client.host] = by_host + 1


def release(client: Client) -> None:
    Slots.taken -= 1
    give_back(Slots.by_client, client.caller)
    give_back(Slots.by_host, client.host)


def give_back(by_client: dict[str, int], client: str) -> None:
    """One less held by ``client`` in a per-client count (call slots here,
    streams in mcp_gateway/streams.py); a client holding none is dropped."""
    held = by_client.get(client, 0) - 1
    if held > 0:
        by_client[client] = held
    else:
        by_client.pop(client, None)


_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def executor(limit: int) -> ThreadPoolExecutor:
    """The call pool, at least ``limit`` threads wide (threads start only as calls need them)."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < limit:
            old = _pool
            _pool, _pool_size = ThreadPoolExecutor(limit, thread_name_prefix="dir2mcp-tool"), limit
            if old is not None:
                old.shutdown(wait=False)  # its running calls finish; new ones go to the wider pool
        return _pool


def run(fn: Callable[..., _R], *args: object, limit: int, **kwargs: object) -> Awaitable[_R]:
    """``fn(*args, **kwargs)`` on a call thread, awaitable. The caller holds a slot."""
    return sync_to_async(fn, thread_sensitive=False, executor=executor(limit))(*args, **kwargs)


def start(fn: Callable[..., _R], *args: object, bounds: Bounds, client: Client) -> asyncio.Future[_R]:
    """Admit ``client`` (:func:`admit`, which may refuse) and start
    ``fn(*args)`` on a call thread; the slot comes back when the thread returns."""
    admit(bounds, client)
    work = asyncio.ensure_future(run(_as_client, client, fn, *args, limit=bounds.limit))
    work.add_done_callback(lambda _done: release(client))
    return work


def _as_client(client: Client, fn: Callable[..., _R], *args: object) -> _R:
    """``fn(*args)`` made for ``client``: the regex worker's turns are shared
    fairly between hosts, and between the clients of a host (corpus/patterns.py)."""
    token = patterns.CLIENT.set((client.host, client.caller))
    try:
        return fn(*args)
    finally:
        patterns.CLIENT.reset(token)


async def finish(
    work: asyncio.Future[_R],
    bounds: Bounds,
    *,
    alongside: Iterable[asyncio.Future[_A]] = (),
    stop: threading.Event | None = None,
) -> set[asyncio.Future[_R] | asyncio.Future[_A]]:
    """Wait for ``work``, or for any of ``alongside`` (a cancel), up to the
    deadline. Returns the futures done; past the deadline ``DEADLINE_EXCEEDED``
    (:class:`Overdue`) is raised, ``stop`` set, and ``work`` counted overdue until its thread returns."""
    waiting: set[asyncio.Future[_R] | asyncio.Future[_A]] = {work, *alongside}
    done, _ = await asyncio.wait(
        waiting, timeout=bounds.deadline or None, return_when=asyncio.FIRST_COMPLETED
    )
    if done:
        return done
    if stop is not None:
        stop.set()
    Slots.overdue += 1
    work.add_done_callback(_no_longer_overdue)
    raise deadline_exceeded(bounds.deadline)


def _no_longer_overdue(work: asyncio.Future[_R]) -> None:
    Slots.overdue -= 1
    if not work.cancelled():
        work.exception()  # retrieved: its client was answered long ago


def deadline_exceeded(seconds: float) -> Overdue:
    return Overdue(
        errors.DEADLINE_EXCEEDED,
        f"the call did not finish within {seconds:g} s (server.call_timeout); it was asked to stop",
    )


def readiness() -> JsonObject:
    """``/healthz``: can this process take another call, and are calls
    finishing within their deadline? (``degraded`` when not.)"""
    limit, running, overdue = Slots.limit, Slots.taken, Slots.overdue
    out: JsonObject = {"ok": True, "running": running}
    if limit is not None:
        out["limit"] = limit
    if overdue:
        return out | {
            "ok": False,
            "degraded": True,
            "overdue": overdue,
            "error": f"{overdue} calls running past their deadline (server.call_timeout)",
        }
    if limit is not None and running >= limit:
        return out | {"ok": False, "degraded": True, "error": "every call slot is taken"}
    return out
