"""Whose state directory this is: one dir2mcp made for this user, here.

A ``.dir2mcp/`` shipped inside a root (a cloned repository, an unpacked
archive) would otherwise be opened as the index and the Django database: it
can carry its writer's admin users and sessions, index entries no file here
holds, and (checked out 0600 under ``umask 077``, or by a tar keeping modes)
a ``secret.token`` whose value is public. So dir2mcp records every state
directory it makes, per user and outside every root: a random id written in
the directory (``state.id``) and, in the per-user trust directory
(``states/<id>.json``, beside ``trusted.json``), that id with the
directory's real path and inode and the time the id file's inode last
changed, which only the kernel sets (as it is made; also on chmod and chown).
A copy may carry the id, but not the path, the inode and that time together
(a copy put back in the place of a deleted original can get its inode
number); and nobody else knows an id this user's record holds.

:func:`verify` is asked before anything in a state directory is read:

- no directory yet, or one holding no file: it becomes this user's (claimed);
- ``state.id`` and a record that agree (same path, inode, id file): it is,
  unless git tracks files in it (a ``git pull`` wrote over ignored files);
- ``state.id`` without such a record (made elsewhere, copied, moved): refused;
- no ``state.id`` but files: made by a dir2mcp before ids were written, or
  shipped. Refused (:func:`legacy_refusal`): everything such a directory
  holds, an archive extractor run by this user writes as well (contents,
  names, modes, modification times, this user's ownership, a
  ``corpus.json`` naming the path it is unpacked to, a lone ``secret.env``),
  and what it cannot set (inode, inode-change times) an earlier dir2mcp
  recorded nowhere to compare with. So there is no evidence to tell the
  user's old directory from a planted one (docs/security.md, "Hostile
  round, 2026-11-29 (session 21)").

Refusals are CONFIG_UNTRUSTED (exit 2); the remedies are to delete it, keep
state elsewhere (``--state-dir``), or ``dir2mcp state adopt``, which sets
aside what it holds first (:func:`adopt`). The device number is recorded but not compared:
those of NFS, LVM and overlay mounts change across mounts and reboots, and
the id and the inode at the same path already tell a copy from the original.

This module sits below :mod:`kernel.state`, which asks it from
:meth:`StateDir.ensure` and every reader of the state directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kernel import __version__, errors

TRUST_DIR_ENV = "DIR2MCP_TRUST_DIR"
#: the state directory's name in its root, by default
STATE_DIRNAME = ".dir2mcp"
#: the id dir2mcp writes in every state directory it makes
ID_NAME = "state.id"
#: in the trust directory: one record per state directory, named by its id
RECORDS_NAME = "states"
_ID = re.compile(r"[0-9a-f]{32}")
_GROUP_OTHER = 0o077
_GIT = ("git", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false")
_GIT_TIMEOUT = 20.0
#: what ``state adopt`` moved out of the way: never read
SET_ASIDE = "set-aside-"

#: (path, id) of the recorded state directories this process found git tracks nothing in
_untracked: set[tuple[str, str]] = set()


def trust_dir() -> Path:
    """The per-user directory of approvals and state records: ``$DIR2MCP_TRUST_DIR``,
    else ``$XDG_CONFIG_HOME/dir2mcp``, else ``~/.config/dir2mcp``."""
    explicit = os.environ.get(TRUST_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    return Path(config_home) / "dir2mcp"


def records_dir() -> Path:
    return trust_dir() / RECORDS_NAME


def credential_problem(path: Path) -> str | None:
    """Why the file at ``path`` (a credential, or a record of the user's
    trust) cannot be trusted, or None (also when absent)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    if st.st_mode & _GROUP_OTHER:
        return f"is readable by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def untrusted(message: str, hint: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(errors.CONFIG_UNTRUSTED, message, hint=hint)


def not_writable(what: str, exc: OSError) -> errors.Dir2mcpError:
    """STATE_NOT_WRITABLE for a write in the per-user trust directory."""
    return errors.Dir2mcpError(
        errors.STATE_NOT_WRITABLE,
        f"{what}: {exc.strerror or exc}",
        hint=f"Make it writable, or set {TRUST_DIR_ENV} to a directory of your own.",
    )


def refused(path: Path, reason: str) -> errors.Dir2mcpError:
    """CONFIG_UNTRUSTED for a state directory this user's record does not know."""
    return untrusted(
        f"the state directory {path} {reason}; dir2mcp reads nothing in it: a copy (a cloned repository's "
        "or an unpacked archive's .dir2mcp/) can carry another's admin users and sessions, index entries "
        "your files do not hold, and a token others know",
        f"Delete it ({path}) and a new one is made; or keep your state elsewhere with --state-dir DIR; "
        f"or run `dir2mcp state adopt --state-dir {path}`, which sets aside what it holds (never read "
        "again) and makes it yours (a new token, signing key and index, built from your files).",
    )


def verify(path: Path) -> None:
    """Raise CONFIG_UNTRUSTED unless the state directory at ``path`` is one
    dir2mcp made for this user (see the module's rules); claim a new or
    empty one. Reads nothing else in it. A directory that cannot be written
    is checked all the same."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(top.st_mode) or not stat.S_ISDIR(top.st_mode):
        raise refused(path, "is not a directory")
    found = _read_id(path)
    if found is None and _holds_no_file(path):
        with contextlib.suppress(OSError):  # read-only: it holds nothing to read anyway
            _claim_or_join(path)
        return
    if found is None:  # another process may have claimed it meanwhile: then its id is there now
        found = _read_id(path)
    if found is not None:
        _check_record(path, found, top)
        return
    raise legacy_refusal(path)


def legacy_refusal(path: Path) -> errors.Dir2mcpError:
    """CONFIG_UNTRUSTED for a state directory holding files but no ``state.id``:
    an earlier dir2mcp's, a shipped one (a repository, an unpacked archive),
    or a ``secret.env`` written by hand into a directory dir2mcp never made.
    None of them can be told apart by what the directory holds (the module's
    docstring), so none is read; ``dir2mcp state adopt`` makes it the user's."""
    return untrusted(
        f"the state directory {path} holds files but no {ID_NAME}: it was not made by this dir2mcp "
        "(made by a version before 2026-11-29, or shipped in a repository or an archive, which can "
        "carry another's admin users and sessions, index entries your files do not hold, and a "
        "token or secret.env others know); dir2mcp reads nothing in it. "
        f"Run `dir2mcp state adopt --state-dir {path}` to make it yours",
        f"`dir2mcp state adopt --state-dir {path}` sets aside what it holds in a set-aside-<time>/ "
        "directory (never read again; take back a secret.env you wrote yourself from there) and records "
        "it as yours: the next run makes a new token, signing key and index from your files. Or delete "
        f"it ({path}) and a new one is made; or keep your state elsewhere with --state-dir DIR. "
        "To keep a secret.env in a new .dir2mcp, let dir2mcp make the directory first "
        "(`dir2mcp config init`, or any command), then write the file.",
    )


def claim(path: Path) -> str:
    """Record the existing directory ``path`` as this user's state directory
    under a new id, then write the id in it; returns the id. Raises
    FileExistsError when ``path`` holds an id already (nothing recorded)."""
    new = secrets.token_hex(16)
    st = os.stat(path)
    record = {
        "path": os.path.realpath(path),
        "device": st.st_dev,
        "inode": st.st_ino,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "by": f"dir2mcp {__version__}",
    }
    store = _records_dir_made()
    record_path = store / f"{new}.json"
    try:
        _publish(record_path, json.dumps(record, indent=2) + "\n")
    except OSError as exc:
        raise not_writable(f"cannot record the state directory {path} in {store}", exc) from exc
    try:
        _publish(path / ID_NAME, new + "\n")
        # The id file's inode-change time: set by the kernel as it is made here,
        # never carried by a copy (cp -a, tar and rsync set modification times only).
        record["id_changed_ns"] = os.lstat(path / ID_NAME).st_ctime_ns
        _publish(record_path, json.dumps(record, indent=2) + "\n", replace=True)
    except BaseException:
        record_path.unlink(missing_ok=True)
        raise
    return new


def forget(path: Path) -> None:
    """Drop this user's record of the state directory at ``path`` (a
    temporary one, removed at exit)."""
    found = _read_id(path)
    if found is not None:
        (records_dir() / f"{found.value}.json").unlink(missing_ok=True)


def adopt(path: Path) -> tuple[int, Path | None]:
    """Make the state directory at ``path`` this user's: move everything in
    it (a copy's token, signing key, database with its users, sessions and
    index, caches, secrets file, logs) into a new ``set-aside-<time>/`` in it,
    which dir2mcp never reads (nothing is lost: delete it, or take back what
    is yours), then record it; the next run makes a new token, key and index
    from the files. Links are moved, never followed. Returns how many entries
    were set aside, and where (None when there were none)."""
    entries = sorted(os.listdir(path))
    if not entries:
        claim(path)
        return 0, None
    aside = path / f"{SET_ASIDE}{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(3)}"
    aside.mkdir(mode=0o700)
    for entry in entries:
        os.rename(path / entry, aside / entry)
    claim(path)
    return len(entries), aside


def _claim_or_join(path: Path) -> None:
    """Claim ``path``, or, when another process claimed it meanwhile, check its claim."""
    try:
        claim(path)
    except FileExistsError:
        found = _read_id(path)
        if found is None:
            raise refused(path, f"has a {ID_NAME} that is not a regular file of yours") from None
        _check_record(path, found, os.lstat(path))


@dataclass(frozen=True)
class _Id:
    """What ``state.id`` holds, and when its inode last changed."""

    value: str
    changed_ns: int


def _read_id(path: Path) -> _Id | None:
    """The id in ``path/state.id``; None when there is none. One that is a
    link, another user's or not an id is refused."""
    id_file = path / ID_NAME
    try:
        fd = os.open(id_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = f"has a {ID_NAME} that cannot be read as a file of yours ({exc.strerror})"
        raise refused(path, why) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise refused(path, f"has a {ID_NAME} that is not a regular file of yours")
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not _ID.fullmatch(text):
        raise refused(path, f"has a {ID_NAME} that is not one dir2mcp writes")
    return _Id(text, st.st_ctime_ns)


def _check_record(path: Path, found: _Id, top: os.stat_result) -> None:
    store = records_dir()
    _check_records_dir(store)
    record_path = store / f"{found.value}.json"
    problem = credential_problem(record_path)
    if problem:
        raise untrusted(
            f"the record of the state directory {path}, {record_path}, {problem}: it is not one "
            "dir2mcp wrote for you",
            f"Delete {record_path}; then delete the state directory, or run "
            f"`dir2mcp state adopt --state-dir {path}`.",
        )
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise refused(path, "was not made by dir2mcp for you on this machine (no record of its id)") from None
    except (OSError, ValueError):
        raise refused(path, f"has a damaged record ({record_path})") from None
    recorded = record.get("path") if isinstance(record, dict) else None
    if recorded != os.path.realpath(path):
        raise refused(path, f"was made at {json.dumps(recorded)} and has been copied or moved here")
    changed = record.get("id_changed_ns")  # absent only while a claim is being written
    if record.get("inode") != top.st_ino or changed not in (None, found.changed_ns):
        raise refused(path, "is a copy of the one dir2mcp made at this path, not that directory")
    checked = (recorded, found.value)
    if checked not in _untracked and _in_work_tree(path):
        # `git pull` writes over ignored files: a repository that starts shipping them fills this one
        if _tracked_by_git(path):
            raise refused(path, "holds files git tracks (a repository wrote them into it)")
        _untracked.add(checked)  # asked once a process: a git run is some 10 ms


def _check_records_dir(store: Path) -> None:
    try:
        st = os.lstat(store)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        problem = "is a symbolic link" if stat.S_ISLNK(st.st_mode) else "is not a directory of yours"
    elif st.st_mode & 0o022:
        problem = f"can be written by group or others (mode {stat.S_IMODE(st.st_mode):04o})"
    else:
        return
    raise untrusted(
        f"the directory of state records {store} {problem}: it is not one dir2mcp made for you",
        f"Remove it, or set {TRUST_DIR_ENV} to a directory of your own.",
    )


def _records_dir_made() -> Path:
    store = records_dir()
    try:
        store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        store.mkdir(mode=0o700, exist_ok=True)
    except OSError as exc:
        raise not_writable(f"cannot make the directory of state records {store}", exc) from exc
    _check_records_dir(store)
    return store


def _publish(path: Path, text: str, *, replace: bool = False) -> None:
    """Write ``text`` to a new file ``path`` (0600) in one step; FileExistsError
    if ``path`` exists, which is then left as it is (unless ``replace``)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), 0o600)
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):  # renamed into place
            os.unlink(tmp)


def _holds_no_file(path: Path) -> bool:
    """Whether ``path`` holds directories at most: nothing a copy could carry."""
    for dirpath, dirnames, filenames in os.walk(path):
        # (but for the id another process is writing: ``.state.id.<random>.tmp``, see _publish)
        if any(not (name.startswith(f".{ID_NAME}.") and name.endswith(".tmp")) for name in filenames):
            return False
        if any(os.path.islink(os.path.join(dirpath, name)) for name in dirnames):
            return False
    return True


def _in_work_tree(path: Path) -> bool:
    """Whether a ``.git`` lies in ``path`` or above it (so that git is asked only then)."""
    here = Path(os.path.realpath(path))
    return any(os.path.lexists(folder / ".git") for folder in (here, *here.parents))


def _tracked_by_git(path: Path) -> bool:
    """Whether git tracks a file under ``path`` (False outside a work tree or without git)."""
    try:
        listed = subprocess.run(
            [*_GIT, "ls-files", "-z", "--", "."],
            cwd=path,
            capture_output=True,
            timeout=_GIT_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and bool(listed.stdout)
