"""The read-only switch of a process's store writes (``up --read-only``).

A server started with ``--read-only`` refuses every store write that is not
the indexer keeping the index in step with the directory (:func:`indexing`):
a tool that would store something (``annotate``'s result, ``transcribe``'s
transcript, any tool added later) gets ``FORBIDDEN`` instead. The writer
(corpus.ingest.writer) checks it before each write; the context
(mcp_gateway.context.install) sets it. It sits below both and imports no
models, so the context can import it before Django is set up.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from kernel import errors

# Why writes other than indexing are refused in this process (None: they are not).
_refusal: str | None = None
_indexing = contextvars.ContextVar("dir2mcp_indexing", default=False)


def refuse_writes(reason: str | None) -> None:
    """Refuse (with ``reason``) or allow again every write in this process
    that is not indexing: ``up --read-only`` (mcp_gateway.context.install)."""
    global _refusal
    _refusal = reason


@contextlib.contextmanager
def indexing() -> Iterator[None]:
    """Mark the writes of this thread as the indexer's (corpus.ingest.pipeline),
    which a read-only server still makes: the index follows the directory."""
    token = _indexing.set(True)
    try:
        yield
    finally:
        _indexing.reset(token)


def check_writable(what: str) -> None:
    """Raise ``FORBIDDEN`` when this process refuses ``what`` (a read-only server)."""
    if _refusal is not None and not _indexing.get():
        raise errors.Dir2mcpError(
            errors.FORBIDDEN,
            f"{what} refused: {_refusal}",
            hint="Restart the server without --read-only to let tools store results.",
        )
