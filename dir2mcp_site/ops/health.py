"""Readiness checks for ``/healthz``: each returns ``{"ok": bool, ...}``."""

from __future__ import annotations

import logging
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection

from corpus import store_faults
from corpus.index import lexical
from corpus.index.dense.vectors import index_path
from corpus.store import get_setting
from kernel import errors
from kernel.jsontypes import JsonObject
from kernel.state import INDEX_FORMAT_VERSION, StateDir
from mcp_gateway import workers

log = logging.getLogger(__name__)


def readiness() -> dict[str, JsonObject]:
    return {
        "database": database(),
        "lexical_index": lexical_index(),
        "vector_indices": vector_indices(),
        "tool_calls": tool_calls(),
    }


def tool_calls() -> JsonObject:
    """A call slot is free and no call runs past its deadline: with every
    slot held (calls stuck on I/O, say) the server answers but cannot take
    calls, and overdue calls mean it is falling behind: degraded either way."""
    return workers.readiness()


def database() -> JsonObject:
    """The database answers, holds an index of the format this build reads,
    and no query of this process has met a damaged page (STORE_CORRUPT)."""
    damaged = store_faults.corrupt_seen()
    if damaged is not None:
        return {"ok": False, "code": errors.STORE_CORRUPT, "error": f"database damaged: {damaged[:200]}"}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        found = get_setting("index_format_version")
    except DatabaseError as exc:
        log.warning("healthz: database not ready: %s", exc)
        return _unavailable("database", exc)
    if found != INDEX_FORMAT_VERSION:
        return {"ok": False, "error": f"index format {found or 'missing'}, expected {INDEX_FORMAT_VERSION}"}
    return {"ok": True, "vendor": connection.vendor}


def lexical_index() -> JsonObject:
    """The full-text index can be queried: one row read, whatever its size
    (``/healthz`` asks no token; it counted every row until session 21, work
    that grew with the index for anyone who asked). Its size is in
    ``dir2mcp.stats``, behind the token."""
    try:
        lexical.answers()
    except DatabaseError as exc:
        log.warning("healthz: lexical index not ready: %s", exc)
        return _unavailable("lexical index", exc)
    return {"ok": True}


def _unavailable(what: str, exc: DatabaseError) -> JsonObject:
    """Not ok, with the store fault's code when it is one (a damaged page: STORE_CORRUPT)."""
    fault = store_faults.classify(exc)
    if fault is None:
        return {"ok": False, "error": f"{what} unavailable: {type(exc).__name__}"}
    return {"ok": False, "code": fault.code, "error": f"{what} unavailable: {fault.message[:200]}"}


def vector_indices() -> JsonObject:
    """Which ``.hnsw`` files exist. They are caches rebuilt on demand, so a
    missing one never makes the server unready."""
    state = StateDir(Path(settings.DIR2MCP_STATE_DIR))
    files = {kind: index_path(state, kind).is_file() for kind in ("text", "code")}
    return {"ok": True, "files": files}
