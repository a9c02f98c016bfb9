"""The index lock: one indexer per corpus, on one machine or on many.

:class:`kernel.state.IndexLock` is a ``flock`` in the state directory: it
keeps two processes that share a state directory from indexing at once.
Processes on several machines share a PostgreSQL database, not a state
directory (docs/scaling.md): two ``up`` there each took their own file lock
and both walked, wrote and tombstoned the same documents. On PostgreSQL the
lock is therefore also a session-level advisory lock on the database,
taken on a connection of its own and held as long as the lock is: the
second indexer, wherever it runs, gets ``INDEX_LOCKED`` naming the holder's
machine and process, serves the index as it is, and takes over once the
holder lets go. A holder that dies drops its connection and the lock with
it; one whose machine vanishes is dropped by PostgreSQL once TCP keepalives
go unanswered (:data:`KEEPALIVES`: about a minute). A holder whose session
the database dropped (PostgreSQL restarted, the connection cut) finds out
before it writes its next batch of changes (:meth:`IndexLock.confirm`): it
takes the lock again, or steps down with ``INDEX_LOCKED`` when another
indexer has it by then.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import TYPE_CHECKING, Self

from django.db import connections

from kernel import errors
from kernel import state as kernel_state

if TYPE_CHECKING:
    import psycopg  # imported where used: on SQLite no process loads it (tests/test_cli.py)

#: pg_advisory_lock key of a database's indexer ("dir2" + "indx", as a
#: signed 64-bit int; corpus.store.PG_MIGRATE_LOCK is another)
PG_INDEX_LOCK = 0x64697232_696E6478
#: The lock's connection tells PostgreSQL to probe its peer: a holder whose
#: machine is gone loses the lock after 30 + 3 × 10 seconds of silence.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3}
#: How the lock's connection names itself (pg_stat_activity.application_name,
#: at most 63 bytes): the refusal tells who holds the lock.
APPLICATION = "dir2mcp indexer"


class IndexLock(kernel_state.IndexLock):
    """The state directory's file lock and, on PostgreSQL, the database's
    advisory lock (module docstring). Both or neither are held."""

    def __init__(self, state: kernel_state.StateDir) -> None:
        super().__init__(state)
        self._session: psycopg.Connection | None = None

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def acquire(self) -> None:
        super().acquire()
        if connections["default"].vendor != "postgresql":
            return
        try:
            self._session = _database_lock()
        except BaseException:
            super().release()
            raise

    def confirm(self) -> None:
        """Still this process's: on PostgreSQL, the lock's session answers,
        or the lock is taken again on a new one; ``INDEX_LOCKED`` when
        another indexer took it meanwhile (the caller stops writing)."""
        session = self._session
        if session is None:
            return
        import psycopg  # noqa: PLC0415  (a session is held on PostgreSQL only)

        try:
            session.execute("SELECT 1")
            return
        except psycopg.Error:
            session.close()
            self._session = None
        self._session = _database_lock()

    def release(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            import psycopg  # noqa: PLC0415  (a session is held on PostgreSQL only)

            with contextlib.suppress(psycopg.Error):  # closing the session releases its lock regardless
                session.execute("SELECT pg_advisory_unlock(%s)", [PG_INDEX_LOCK])
            session.close()
        super().release()


def _database_lock() -> psycopg.Connection:
    """A connection holding the database's index lock; ``INDEX_LOCKED``
    naming the holder when another session holds it."""
    import psycopg  # noqa: PLC0415  (PostgreSQL only: on SQLite no process loads it)

    me = f"{APPLICATION} {socket.gethostname()} pid {os.getpid()}".encode()[:63].decode(errors="ignore")
    params = {**connections["default"].get_connection_params(), **KEEPALIVES, "application_name": me}
    try:
        session = psycopg.connect(autocommit=True, **params)
    except psycopg.Error as exc:
        raise _unreachable(exc) from exc
    try:
        row = session.execute("SELECT pg_try_advisory_lock(%s)", [PG_INDEX_LOCK]).fetchone()
        if row is not None and row[0]:
            return session
        holders = session.execute(
            "SELECT a.application_name, host(a.client_addr) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.classid = %s AND l.objid = %s AND l.objsubid = 1",
            [PG_INDEX_LOCK >> 32, PG_INDEX_LOCK & 0xFFFFFFFF],
        ).fetchall()
    except psycopg.Error as exc:
        session.close()
        raise _unreachable(exc) from exc
    session.close()
    holder = ", ".join(f"{name or 'unnamed'} from {addr or 'a local socket'}" for name, addr in holders)
    raise errors.Dir2mcpError(
        errors.INDEX_LOCKED,
        f"another indexer ({holder or 'gone a moment ago'}) is indexing this corpus's database",
        hint="Wait for it to finish, or stop it; `status` shows its progress.",
    )


def _unreachable(exc: psycopg.Error) -> errors.Dir2mcpError:
    """The lock could not be asked for: as good as taken (a server retries it)."""
    return errors.Dir2mcpError(
        errors.INDEX_LOCKED,
        f"cannot take the index lock on the database ({exc.__class__.__name__})",
        hint="Check DATABASE_URL and that PostgreSQL is up; a server retries by itself.",
    )
