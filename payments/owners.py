"""Which process handles an unfinished payment, and whether it is still alive.

A payment's replay row (payments/replay.py) names its ``owner``: the process
that claimed it, or took its settlement over. Every process that handles
paid calls holds an exclusive ``flock`` on
``<state>/payments/owners/<owner>.lock`` for as long as it lives, and the
kernel drops that lock when the process dies, however it dies (SIGKILL, the
OOM killer, a crash). So a retry that finds a payment still ``pending`` or
``settling`` can tell a request that is still running (the lock is held:
"in progress") from one whose process died (the lock is free: the retry
takes the payment over at once).

An owner whose lock file is not in this state directory (a process of
another machine sharing the database, or one that could not write its file)
cannot be probed: it is :data:`UNKNOWN`, and only the time-based rule of
payments/replay.py can take its settlement over.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

from kernel.state import DIR_MODE, FILE_MODE

logger = logging.getLogger(__name__)

ALIVE, DEAD, UNKNOWN = "alive", "dead", "unknown"
_TOKEN = re.compile(r"[0-9]{1,10}-[0-9a-f]{12}")


def owners_dir(state_dir: Path) -> Path:
    return Path(state_dir) / "payments" / "owners"


class ProcessLock:
    """This process's liveness lock; its :attr:`token` is the ``owner`` it writes."""

    def __init__(self, state_dir: Path) -> None:
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self.path = owners_dir(state_dir) / f"{self.token}.lock"
        self._fd: int | None = None
        try:
            for folder in (self.path.parent.parent, self.path.parent):
                folder.mkdir(mode=DIR_MODE, exist_ok=True)
            # Locked before it gets its name, so no probe ever sees it free.
            draft = self.path.with_suffix(".new")
            fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_EXCL, FILE_MODE)
            self._fd = fd
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.rename(draft, self.path)
        except OSError as exc:
            self.close()
            logger.warning(
                "cannot hold %s (%s): a payment this process leaves unfinished is taken over only by time",
                self.path.name,
                exc.strerror or exc,
            )

    def close(self) -> None:
        """Release the lock: from now on this owner is dead. Its file stays, as a
        killed process's does, so a payment it left unfinished is taken over at
        once; :func:`sweep` deletes it once no such payment needs it."""
        if self._fd is not None:
            self.path.with_suffix(".new").unlink(missing_ok=True)  # if it never got its name
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


def probe(state_dir: Path, token: str) -> str:
    """:data:`ALIVE`, :data:`DEAD` or :data:`UNKNOWN` for the owner ``token``."""
    if not _TOKEN.fullmatch(token or ""):
        return UNKNOWN
    try:
        fd = os.open(owners_dir(state_dir) / f"{token}.lock", os.O_RDONLY)
    except OSError:
        return UNKNOWN
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return ALIVE
    except OSError:
        return UNKNOWN
    finally:
        os.close(fd)  # releases the probe's own lock, if it got it
    return DEAD


def sweep(state_dir: Path, keep: Iterable[str]) -> int:
    """Delete the lock files of dead owners not in ``keep`` (the owners of
    unfinished payments, whose files are the proof they died); the number deleted."""
    keep = set(keep)
    removed = 0
    try:
        paths = list(owners_dir(state_dir).glob("*.lock"))
    except OSError:
        return 0
    for path in paths:
        token = path.name.removesuffix(".lock")
        if token not in keep and probe(state_dir, token) == DEAD:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
