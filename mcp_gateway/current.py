"""The process's one :class:`~mcp_gateway.Context`.

``up`` and ``mcp_stdio`` build it from their flags and :func:`install` it, so
the background indexer and the tools share one embedder (and so one
in-memory dense index). Under a bare ``daphne dir2mcp_site.asgi:application``
deployment :func:`get` builds it lazily from the environment, with its
payment gate, which prices the tool registry's catalog: this module sits
above both the context and the registry.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from corpus import write_guard
from corpus.store import open_store
from kernel.config import config_named, default_config_path, load_config
from kernel.jsontypes import JsonObject
from mcp_gateway import registry
from mcp_gateway.context import Context, build

if TYPE_CHECKING:  # imported when a server sells calls (payment_gate): x402 is slow to import
    from payments.gate import Gate

_current: Context | None = None
_build_lock = threading.Lock()


def get() -> Context:
    """The process's context, built from the environment on first use.

    A bare daphne process makes sure the store is migrated first; ``up``
    and ``mcp_stdio`` have done that before they install theirs.
    """
    global _current
    if _current is None:
        with _build_lock:
            if _current is None:
                ctx = build()
                open_store(ctx.state)
                ctx.gate = payment_gate(ctx)
                _current = ctx
    return _current


def payment_gate(ctx: Context, emit: Callable[[JsonObject], None] | None = None) -> Gate | None:
    """The x402 gate for ``ctx``'s configuration, or None when calls are free.

    ``x402.mode: required`` with an incomplete configuration raises
    CONFIG_INVALID; ``on`` with one serves free and warns (payments/gate.py).
    """
    if ctx.config.x402.mode == "off":
        return None
    from payments import gate  # x402 and its eth libraries take ~1.4 s to import: paid servers only

    return gate.from_config(ctx.config, ctx.state.path, emit=emit, tools=registry.catalog())


def peek() -> Context | None:
    """The installed context, without building one."""
    return _current


def mcp_path() -> str:
    """The endpoint path, known without touching the database (URLconf time)."""
    if _current is not None:
        return _current.mcp_path
    root = Path(settings.DIR2MCP_ROOT)
    return load_config(default_config_path(root), named=config_named()).server.mcp_path


#: why a read-only server refuses a tool's write (corpus.write_guard.check_writable)
READ_ONLY_REASON = "this server runs with --read-only (tools may not store results)"


def install(ctx: Context | None) -> None:
    """Make ``ctx`` the process's context (``None`` to forget it, in tests);
    a read-only one makes the store refuse every write but the indexer's."""
    global _current
    _current = ctx
    write_guard.refuse_writes(READ_ONLY_REASON if ctx is not None and ctx.read_only else None)
