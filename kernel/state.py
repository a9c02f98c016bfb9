"""The state directory (spec §4): layout, locks, format checks, summaries.

``<root>/.dir2mcp`` by default. It holds the database (``meta.sqlite``),
the ANN indices, ``corpus.json``, the config snapshot, the bearer token and
the caches. Files that other processes read are replaced atomically.

Only its owner may read it: the directory and every directory in it are
0700, every file 0600. :meth:`StateDir.ensure` creates it so, takes group
and other access off whatever an earlier version or another tool left
looser (with a warning), and turns those bits off in the process umask, so
files that libraries create in it later (SQLite's ``-wal`` and ``-shm``,
the ANN index, the caches, logs) are owner-only too; what this module
writes gets its mode explicitly (docs/security.md, "Secrets at rest").

It must be one dir2mcp made for this user: :meth:`StateDir.ensure` and every
reader (the token, ``status``'s read-only open) refuse one this user's record
does not know, such as a ``.dir2mcp/`` a cloned repository ships, before
anything in it is read (:mod:`kernel.state_identity`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from kernel import errors, state_identity
from kernel.jsontypes import JsonObject
from kernel.state_identity import credential_problem as credential_problem

INDEX_FORMAT_VERSION = "1"
#: The state directory and the directories in it.
DIR_MODE = 0o700
#: Every file in the state directory.
FILE_MODE = 0o600
_GROUP_OTHER = 0o077

log = logging.getLogger(__name__)


def restrict_umask() -> int:
    """Turn group and other access off in the process umask (keeping any
    bit the user's umask already turns off); returns the umask now in force."""
    previous = os.umask(0o077)
    os.umask(previous | _GROUP_OTHER)
    return previous | _GROUP_OTHER


@dataclass(frozen=True)
class StateDir:
    """Paths inside one state directory."""

    path: Path

    @property
    def meta_db(self) -> Path:
        return self.path / "meta.sqlite"

    @property
    def corpus_json(self) -> Path:
        return self.path / "corpus.json"

    @property
    def connection_json(self) -> Path:
        return self.path / "connection.json"

    @property
    def snapshot(self) -> Path:
        return self.path / ".dir2mcp.yaml.snapshot"

    @property
    def token_file(self) -> Path:
        return self.path / "secret.token"

    @property
    def id_file(self) -> Path:
        return self.path / state_identity.ID_NAME

    @property
    def cache(self) -> Path:
        return self.path / "cache"

    @property
    def locks(self) -> Path:
        return self.path / "locks"

    @property
    def index_lock(self) -> Path:
        return self.locks / "index.lock"

    def ensure(self) -> list[str]:
        """Create the layout (0700), or fail with STATE_NOT_WRITABLE before any write.

        Entries an earlier run or another tool left readable by group or
        others are tightened and returned (relative to the state directory),
        and a warning is logged; ``[]`` when all was owner-only already.
        """
        restrict_umask()
        self.check_shipped()
        try:
            self.path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            state_identity.verify(self.path)
            for sub in (self.cache, self.locks, self.path / "payments"):
                sub.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            for kind in ("ocr", "transcribe", "annotations"):
                (self.cache / kind).mkdir(mode=DIR_MODE, exist_ok=True)
            tightened = self.tighten()
            probe = tempfile.NamedTemporaryFile(dir=self.path, prefix=".probe-", delete=True)
            probe.close()
        except OSError as exc:
            raise errors.Dir2mcpError(
                errors.STATE_NOT_WRITABLE,
                f"cannot write the state directory {self.path}: {exc.strerror or exc}",
                hint="Make it writable, or choose another with --state-dir.",
            ) from exc
        if tightened:
            log.warning(
                "the state directory %s was readable by group or others; tightened %d entries "
                "to owner-only (directories 0700, files 0600): %s%s",
                self.path,
                len(tightened),
                json.dumps(tightened[:10]),  # quoted: a name cannot forge a log line
                " and more" if len(tightened) > 10 else "",
            )
        return tightened

    def check_shipped(self) -> None:
        """Refuse what a directory someone else wrote (a cloned repository's
        ``.dir2mcp/``) could plant: a symlink for the state directory or a
        directory of its layout (dir2mcp would write, and tighten, wherever it
        points), or a credential file (``secret.token``, ``django.secret``)
        that is a link, is not the user's, or that group or others could read
        (files a clone or an archive brings in are 0644): its value is known."""
        layout = [self.path, self.cache, self.locks, self.path / "payments"]
        layout += [self.cache / kind for kind in ("ocr", "transcribe", "annotations")]
        for path in layout:
            if path.is_symlink():
                raise state_identity.untrusted(
                    f"{path} is a symbolic link (to {os.readlink(path)}); dir2mcp writes its state, and "
                    "makes it owner-only, only in directories of its own",
                    "Remove the link, or pass the directory it points to with --state-dir if it is yours.",
                )
        for path in (self.token_file, self.path / "django.secret"):
            check_credential(path)

    def check_identity(self) -> None:
        """Refuse (CONFIG_UNTRUSTED) a state directory this user's record does
        not know, or one that plants a link or a known credential; before
        anything in it is read (:func:`kernel.state_identity.verify`)."""
        self.check_shipped()
        state_identity.verify(self.path)

    def adopt(self) -> tuple[int, Path | None]:
        """Set aside everything in the state directory and record it as this
        user's (``dir2mcp state adopt``, :func:`kernel.state_identity.adopt`);
        returns how many entries were set aside, and where. A link for it or
        for a directory of its layout is refused, untouched."""
        layout = [self.path, self.cache, self.locks, self.path / "payments"]
        for path in layout:
            if path.is_symlink():
                raise state_identity.untrusted(
                    f"{path} is a symbolic link (to {os.readlink(path)}); not adopting it",
                    "Remove the link, or pass the directory it points to with --state-dir if it is yours.",
                )
        self.path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        found = state_identity.adopt(self.path)
        self.ensure()
        return found

    def tighten(self) -> list[str]:
        """Take group and other access off the state directory and everything
        in it, links not followed; return what was looser, relative to it.

        Never run on the home directory or ``/`` (a mistaken ``--state-dir``):
        those are left as they are, with a warning.
        """
        top = self.path.absolute()
        if top in (Path.home().absolute(), Path(top.anchor)):
            log.warning("not changing the permissions of %s: it is not a directory of dir2mcp's own", top)
            return []
        changed: list[str] = []
        if _drop_group_other(str(top)):
            changed.append(".")
        for dirpath, dirnames, filenames in os.walk(top):
            for name in (*dirnames, *filenames):
                path = os.path.join(dirpath, name)
                if _drop_group_other(path):
                    changed.append(os.path.relpath(path, top))
        return changed


def check_credential(path: Path) -> None:
    """Raise CONFIG_UNTRUSTED for a credential file :func:`credential_problem` refuses."""
    problem = credential_problem(path)
    if problem:
        raise state_identity.untrusted(
            f"{path} {problem}: whoever wrote it or could read it knows it",
            f"Delete it ({path}) and dir2mcp makes a new one; a bearer token of your own can also "
            "come from DIR2MCP_AUTH_TOKEN.",
        )


def _drop_group_other(path: str) -> bool:
    """Remove group and other bits from ``path`` (not a link); True if any were set."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:  # removed meanwhile (a temp file)
        return False
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & _GROUP_OTHER:
        return False
    os.chmod(path, stat.S_IMODE(st.st_mode) & ~_GROUP_OTHER)
    return True


def atomic_write(path: Path, data: str | bytes, *, mode: int = FILE_MODE) -> None:
    """Write ``data`` to ``path`` through a temp file and a rename; the file
    gets ``mode`` (owner-only unless asked otherwise), whatever the umask."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: JsonObject) -> None:
    atomic_write(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def read_json(path: Path) -> JsonObject | None:
    """The JSON object in ``path``; None if it cannot be read or holds no object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


class SpaceReserve:
    """A few hundred KiB held in ``locks/reserve`` while a server runs, and
    given back when the file system fills up, so that the server can still
    record what is waiting to be written (``status`` reads it from the
    database) while the disk is full; taken again once writes land."""

    SIZE = 256 * 1024

    def __init__(self, state: StateDir) -> None:
        self.path = state.locks / "reserve"

    def hold(self) -> bool:
        """Set the space aside (if it is free); whether it is held now."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE)
        except OSError:
            return False
        try:
            os.posix_fallocate(fd, 0, self.SIZE)
            return True
        except OSError:  # not that much free: hold none rather than part
            os.ftruncate(fd, 0)
            return False
        finally:
            os.close(fd)

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


class IndexLock:
    """An exclusive, non-blocking lock on ``locks/index.lock``.

    The kernel releases a ``flock`` when its holder dies, so a crashed
    indexer never leaves a stale lock behind.
    """

    def __init__(self, state: StateDir) -> None:
        self.path = state.index_lock
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise errors.Dir2mcpError(
                    errors.INDEX_LOCKED,
                    f"another indexer (pid {holder}) is using {self.path.parent.parent}",
                    hint="Wait for it to finish, or stop it; `status` shows its progress.",
                ) from exc
            raise
        os.fchmod(fd, FILE_MODE)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> IndexLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def index_lock_holder(state: StateDir) -> int | None:
    """The pid of the process holding ``state``'s index lock (:class:`IndexLock`
    writes it when taken and clears it when let go); None when none holds
    it: no pid written, or its process is gone (one killed leaves its pid,
    and the kernel dropped its ``flock``)."""
    try:
        found = state.index_lock.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    pid = int(found) if found.isdigit() else 0
    return pid if pid_alive(pid) else None


def ensure_token(state: StateDir) -> str:
    """Return the bearer token in ``secret.token``, creating it (0600) once;
    one dir2mcp did not write for this user, or in a state directory this
    user's record does not know, is refused (:meth:`StateDir.check_identity`)."""
    state.check_identity()
    try:
        token = state.token_file.read_text(encoding="utf-8").strip()
        if token:
            return token
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    atomic_write(state.token_file, token + "\n", mode=0o600)
    return token


def resolve_root(option: str | None) -> Path:
    """The directory to serve: ``--dir`` (``option``), else ``settings.DIR2MCP_ROOT``."""
    root = Path(option).expanduser().absolute() if option else Path(settings.DIR2MCP_ROOT)
    if not root.is_dir() or not os.access(root, os.R_OK | os.X_OK):
        raise errors.Dir2mcpError(
            errors.ROOT_INACCESSIBLE,
            f"root directory {root} does not exist or cannot be read",
            hint="Pass an existing, readable directory with --dir.",
        )
    return root


def resolve_state(option: str | None, root_option: str | None, root: Path) -> StateDir:
    """The state directory: ``--state-dir`` (``option``); else ``<root>/.dir2mcp`` when
    ``--dir`` (``root_option``) is given and ``DIR2MCP_STATE_DIR`` is not set; else the setting."""
    if option:
        return StateDir(Path(option).expanduser().absolute())
    if root_option and not os.environ.get("DIR2MCP_STATE_DIR"):
        return StateDir(root / ".dir2mcp")
    return StateDir(Path(settings.DIR2MCP_STATE_DIR))
