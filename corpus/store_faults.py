"""What a failed store operation means: a damaged database, a full or
read-only file system, or neither (a bug).

:func:`classify` is the one mapper every catch-all goes through (the
commands' exit codes, the tool and resource handlers, the REST mirror, the
indexer's writes), so that a damaged database is ``STORE_CORRUPT`` (exit 5)
and a full disk ``STATE_NOT_WRITABLE`` (exit 6) wherever they surface, in
the file system's own words, instead of ``INTERNAL_ERROR`` or a traceback.

It reads the causes Django chains onto its wrapped errors: SQLite's result
code (``sqlite_errorcode``), PostgreSQL's SQLSTATE, and an ``OSError``'s
errno. A damaged database found here is remembered (:func:`corrupt_seen`),
so ``/healthz`` stops saying ok once any query met one.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from kernel import errors

log = logging.getLogger(__name__)

# SQLite primary result codes (https://www.sqlite.org/rescode.html)
SQLITE_READONLY = 8
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_NOTADB = 26
# PostgreSQL SQLSTATEs: disk_full, data_corrupted, index_corrupted, read_only_sql_transaction
PG_FULL = "53100"
PG_CORRUPT = ("XX001", "XX002")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_CHAIN_LIMIT = 16

#: the first damage a query met in this process, None while none did
_corrupt: str | None = None

CORRUPT_HINT = (
    "Run `dir2mcp reindex`: it moves the damaged database aside (meta.sqlite.corrupt-<time>) and rebuilds."
)
FULL_HINT = (
    "Free space on that file system (or choose another state directory with --state-dir) and run the "
    "command again; a running server keeps the writes that failed and retries them."
)


def classify(exc: BaseException) -> errors.Dir2mcpError | None:
    """The store fault behind ``exc`` (or any exception it was raised from)
    as a coded error (``STORE_CORRUPT``, ``STATE_NOT_WRITABLE``), or None
    when it is none of them."""
    for cause in _chain(exc):
        found = _one(cause)
        if found is not None:
            return found
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < _CHAIN_LIMIT:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _one(exc: BaseException) -> errors.Dir2mcpError | None:
    if isinstance(exc, errors.Dir2mcpError) and exc.code in (errors.STORE_CORRUPT, errors.STATE_NOT_WRITABLE):
        return exc
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(exc, sqlite3.Error) and isinstance(code, int):
        primary = code & 0xFF
        if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
            return corrupt(str(exc))
        if primary == SQLITE_FULL:
            return not_writable(f"{exc}: {os.strerror(errno.ENOSPC)}" if _no_space_left() else str(exc))
        if primary == SQLITE_IOERR and _no_space_left():
            return not_writable(f"{exc}: {os.strerror(errno.ENOSPC)}")
        if primary == SQLITE_READONLY:
            return not_writable(str(exc))
        return None
    sqlstate = getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)
    if isinstance(sqlstate, str):
        if sqlstate == PG_FULL:
            return not_writable(str(exc).strip())
        if sqlstate in PG_CORRUPT:
            return corrupt(str(exc).strip())
        return None
    if isinstance(exc, OSError) and exc.errno in (*_NO_SPACE, errno.EROFS):
        where = f" ({exc.filename})" if exc.filename else ""
        return not_writable(f"{exc.strerror or exc}{where}")
    return None


def corrupt(detail: str) -> errors.Dir2mcpError:
    """``STORE_CORRUPT`` for the database in use, remembered for ``/healthz``."""
    global _corrupt
    if _corrupt is None:
        log.info("the index database %s is damaged: %s", _database_name(), detail)
        _corrupt = detail
    return errors.Dir2mcpError(
        errors.STORE_CORRUPT,
        f"the index database {_database_name()} is damaged ({detail})",
        hint=CORRUPT_HINT,
    )


def not_writable(detail: str) -> errors.Dir2mcpError:
    """``STATE_NOT_WRITABLE`` with the words of the database or the file system."""
    return errors.Dir2mcpError(
        errors.STATE_NOT_WRITABLE,
        f"cannot write the index in {settings.DIR2MCP_STATE_DIR}: {detail}",
        hint=FULL_HINT,
    )


def corrupt_seen() -> str | None:
    """What damage a query of this process met, if any (``/healthz``)."""
    return _corrupt


def forget_corruption() -> None:
    """After a rebuild: the database in use is a new one."""
    global _corrupt
    _corrupt = None


def _database_name() -> str:
    db = settings.DATABASES["default"]
    return (
        str(db["NAME"])
        if db["ENGINE"].endswith("sqlite3")
        else f"{db['NAME']} ({db['ENGINE'].rsplit('.', 1)[-1]})"
    )


def _no_space_left() -> bool:
    """Whether the state directory's file system has no block left for us
    (SQLite reports some writes that ran out of space as a plain I/O error)."""
    try:
        found = os.statvfs(Path(settings.DIR2MCP_STATE_DIR))
    except OSError:
        return False
    return found.f_bavail == 0
