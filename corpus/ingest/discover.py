"""Discovery (spec §7.1): walk the root and list the files that may be indexed.

The walk is on the hot path of every reindex, so it prunes excluded
directories before descending and takes sizes from one ``lstat`` per file.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path

from corpus.gitignore import GitignoreRule
from corpus.ingest.exclusions import ExclusionTally
from corpus.security import (
    HARDLINK_REASON,
    LINK_LOOP_REASON,
    PERMISSION_REASON,
    ExclusionEngine,
)
from kernel import errors

_by_name = attrgetter("name")
#: How a symlink the policy does not follow is counted.
SYMLINK_REASON = "symlink not followed (ingest.follow_symlinks: false)"


@dataclass(frozen=True)
class FileEntry:
    rel_path: str
    abs_path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class WalkProblem:
    """A file or directory that could not be walked; the walk goes on without it."""

    rel_path: str
    code: str
    message: str


@dataclass(frozen=True)
class _Dir:
    path: str
    real: str
    rel: str
    chain: tuple[GitignoreRule, ...]
    # Real paths of this directory and its ancestors; a symlink back into
    # one of them is a loop.
    lineage: frozenset[str]


def walk(
    engine: ExclusionEngine, *, start: str = "", tally: ExclusionTally | None = None
) -> Iterator[FileEntry | WalkProblem]:
    """Yield every allowed regular file under ``engine.root``, sorted, depth first.

    ``start`` limits the walk to one file or directory below the root (the
    watcher's targeted refresh); if it is missing or excluded nothing is yielded.
    ``tally`` counts each entry left out, by reason (an excluded directory
    once: the walk does not descend into it).
    """
    tally = tally if tally is not None else ExclusionTally()
    root = str(engine.root)
    _check_root(root)
    stack: list[_Dir] = []
    if not start:
        stack.append(_Dir(root, root, "", engine.gitignore_chain(""), frozenset({root})))
    else:
        yield from _start(engine, start, stack)
    # Each symlinked directory target is walked through a link at most once,
    # which keeps link-heavy trees linear; real directories are always walked.
    followed: set[str] = set()
    while stack:
        current = stack.pop()
        try:
            entries = _scan(current.path)
        except OSError as exc:
            yield _problem(current.rel, exc)
            continue
        subdirs: list[_Dir] = []
        for entry in entries:
            yield from _visit(engine, current, entry, subdirs, followed, tally)
        stack.extend(reversed(subdirs))


def _start(engine: ExclusionEngine, start: str, stack: list[_Dir]) -> Iterator[FileEntry | WalkProblem]:
    try:
        resolved = engine.resolve(start)
    except errors.Dir2mcpError as exc:
        yield from _refused(start, exc)
        return
    rel, real, st = resolved.rel, str(resolved.path), resolved.st
    path = os.path.join(str(engine.root), rel)
    if stat.S_ISDIR(st.st_mode):
        stack.append(_Dir(path, real, rel, engine.gitignore_chain(rel), frozenset({str(engine.root), real})))
    elif stat.S_ISREG(st.st_mode):
        yield FileEntry(rel, Path(path), st.st_size, st.st_mtime_ns)


def _refused(rel: str, exc: errors.Dir2mcpError) -> Iterator[WalkProblem]:
    """A path the resolver refused, as the walk reports it: an escape, a
    hard link, a symlink loop or a permission refusal is a problem; an
    excluded, vanished or special target is passed over, as a plain entry
    of that kind would be."""
    if exc.code == errors.PATH_OUTSIDE_ROOT or exc.message.startswith((HARDLINK_REASON, PERMISSION_REASON)):
        yield WalkProblem(rel, exc.code, exc.message)
    elif exc.message.startswith(LINK_LOOP_REASON):
        yield WalkProblem(rel, errors.EXTRACT_FAILED, f"cannot read: {exc.message}")


def _check_root(root: str) -> None:
    try:
        with os.scandir(root):
            pass
    except OSError as exc:
        raise errors.Dir2mcpError(
            errors.ROOT_INACCESSIBLE, f"cannot read root {root}: {exc.strerror or exc}"
        ) from None


def _scan(path: str) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted(it, key=_by_name)


def _visit(
    engine: ExclusionEngine,
    parent: _Dir,
    entry: os.DirEntry[str],
    subdirs: list[_Dir],
    followed: set[str],
    tally: ExclusionTally,
) -> Iterator[FileEntry | WalkProblem]:
    rel = f"{parent.rel}/{entry.name}" if parent.rel else entry.name
    try:
        if entry.is_symlink():
            if engine.policy.follow_symlinks:
                yield from _visit_symlink(engine, parent, entry, rel, subdirs, followed)
            else:
                tally.add(SYMLINK_REASON, is_dir=False)
            return
        if entry.is_dir(follow_symlinks=False):
            reason = engine.entry_reason(rel, is_dir=True, chain=parent.chain)
            if reason is None:
                real = os.path.join(parent.real, entry.name)
                chain = engine.gitignore_chain(rel, parent.chain)
                subdirs.append(_Dir(entry.path, real, rel, chain, parent.lineage | {real}))
            else:
                tally.add(reason, is_dir=True)
            return
        if not entry.is_file(follow_symlinks=False):
            return
        reason = engine.entry_reason(rel, chain=parent.chain)
        if reason is not None:
            tally.add(reason, is_dir=False)
            return
        st = entry.stat(follow_symlinks=False)
        if engine.hardlink_refused(st):
            yield WalkProblem(rel, errors.FORBIDDEN, HARDLINK_REASON)
            return
        yield FileEntry(rel, Path(entry.path), st.st_size, st.st_mtime_ns)
    except FileNotFoundError:
        return  # removed while we were walking
    except OSError as exc:
        yield _problem(rel, exc)


def _visit_symlink(
    engine: ExclusionEngine,
    parent: _Dir,
    entry: os.DirEntry[str],
    rel: str,
    subdirs: list[_Dir],
    followed: set[str],
) -> Iterator[FileEntry | WalkProblem]:
    # The resolver decides, as it does for every reader: a link the walk
    # lists is one that open_file and the indexer's opener will follow.
    try:
        resolved = engine.resolve(rel)
    except errors.Dir2mcpError as exc:
        yield from _refused(rel, exc)
        return
    st, target = resolved.st, str(resolved.path)
    if stat.S_ISREG(st.st_mode):
        yield FileEntry(rel, Path(entry.path), st.st_size, st.st_mtime_ns)
    elif engine.entry_reason(rel, is_dir=True, chain=parent.chain) is not None:
        return  # a link named like an ignored directory ("node_modules")
    elif target in parent.lineage:
        yield WalkProblem(rel, errors.FORBIDDEN, "symlink loop: points to one of its own parent directories")
    elif target not in followed:
        followed.add(target)
        chain = engine.gitignore_chain(rel, parent.chain)
        subdirs.append(_Dir(entry.path, target, rel, chain, parent.lineage | {target}))


def _problem(rel: str, exc: OSError) -> WalkProblem:
    if isinstance(exc, PermissionError):
        return WalkProblem(rel or ".", errors.FORBIDDEN, "permission denied")
    return WalkProblem(rel or ".", errors.EXTRACT_FAILED, f"cannot read: {exc.strerror or exc}")
