"""Where tool calls run: threads of their own, never the event loop's default pool.

Everything else a request needs (initialize, the session lookup, DELETE,
the REST mirror's edge) runs in the loop's default executor, which is small
(``min(32, CPUs + 4)`` threads: six on a two-CPU machine). A tool call may
wait on I/O (a provider, a slow disk); run there, six stuck calls would
starve every later request while ``/healthz`` still said ok. Tool calls,
MCP and REST alike, take one of ``server.max_concurrent_calls`` slots and
run in a pool exactly that wide, so a call never queues behind another, one
past the limit is refused at once (busy, retryable), and the slots are what
``/healthz`` reports as ``tool_calls``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async


class Slots:
    """Tool calls running in this process, up to ``server.max_concurrent_calls``.

    A call holds its slot until its worker thread returns, even when the
    client cancelled or hung up, so the limit bounds real work. Taken and
    released on the event loop's thread; ``/healthz`` only reads.
    """

    taken = 0
    limit: int | None = None  # the limit last asked for: None until the first call

    @classmethod
    def take(cls, limit: int) -> bool:
        cls.limit = limit
        if cls.taken >= limit:
            return False
        cls.taken += 1
        return True

    @classmethod
    def release(cls, _future=None) -> None:
        cls.taken -= 1


_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


def executor(limit: int) -> ThreadPoolExecutor:
    """The tool-call pool, at least ``limit`` threads wide (threads start only as calls need them)."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < limit:
            old = _pool
            _pool, _pool_size = ThreadPoolExecutor(limit, thread_name_prefix="dir2mcp-tool"), limit
            if old is not None:
                old.shutdown(wait=False)  # its running calls finish; new ones go to the wider pool
        return _pool


def run(fn, *args, limit: int, **kwargs):
    """``fn(*args, **kwargs)`` on a tool-call thread, awaitable. The caller holds a slot."""
    return sync_to_async(fn, thread_sensitive=False, executor=executor(limit))(*args, **kwargs)


def readiness() -> dict:
    """``/healthz``: can this process take another tool call?"""
    limit, running = Slots.limit, Slots.taken
    if limit is None:
        return {"ok": True, "running": running}
    if running >= limit:
        return {"ok": False, "running": running, "limit": limit, "error": "every tool-call slot is taken"}
    return {"ok": True, "running": running, "limit": limit}
