"""The walk and the resolver agree on what is inside the root (issue #20).

Random small trees of files, directories, symlinks (inside and out of the
root, into a sibling named like it, chains, loops, dangling) and hard links:
every file the discovery walk lists resolves inside the root, to the path
the kernel resolves it to, and no name whose real path lies outside the
root is ever listed. The oracle is the kernel's ``realpath`` and pathlib's
``is_relative_to``, not the containment rule under test.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from corpus.ingest.discover import FileEntry, walk
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel.config import DEFAULT_PATH_EXCLUDES
from kernel.errors import Dir2mcpError

# Every tree starts with these, so links have real things to point at.
SKELETON_FILES = ["a", "d/a", "d/e/a"]
# Where entries may go, below the root; an entry whose parent is not a real
# directory by then, or whose name is taken, is left out.
SLOTS = ["l", "m", "b", "d/l", "d/m", "d/e/l", "f/l", ".env", "node_modules", "n/l"]
# A symlink's target is a prefix and a tail: relative ones climb by depth,
# out of the root and back in, or into the sibling named like the root.
PREFIXES = ["", "../", "../../", "../../../", "../corpus/", "../../corpus/", "{root}/", "{root}2/"]
PREFIXES += ["{base}/outside/", "{root}/../outside/", "{root}/d/../"]
TAILS = ["a", "d", "d/a", "d/e", "l", "m", "d/l", "f", "missing", ".", ""]
# Below the root's parent: what targets that leave the root find there.
OUTSIDE_FILES = ["a", "d/a", "outside/a", "outside/d/a", "outside/f", "corpus2/a", "corpus2/d/a", "corpus2/f"]
# Hard link sources: files outside the root, and the skeleton's.
LINK_SOURCES = ["{base}/outside/f", "{base}/corpus2/f", "{root}/a", "{root}/d/a"]

TARGET = st.builds(
    lambda prefix, tail: (prefix + tail) or ".", st.sampled_from(PREFIXES), st.sampled_from(TAILS)
)
ENTRY = st.one_of(
    st.tuples(st.just("symlink"), st.sampled_from(SLOTS), TARGET),
    st.tuples(st.sampled_from(["file", "dir"]), st.sampled_from(SLOTS), st.just("")),
    st.tuples(st.just("hardlink"), st.sampled_from(SLOTS), st.sampled_from(LINK_SOURCES)),
)
MAX_DEPTH = 5


def _build(base: Path, entries: list[tuple[str, str, str]]) -> Path:
    root = base / "corpus"
    for rel in OUTSIDE_FILES:
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(rel)
    for rel in SKELETON_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    for kind, slot, target in entries:
        path = root / slot
        if not _real_dir(root, path.parent) or os.path.lexists(path):
            continue
        target = target.format(root=root, base=base)
        if kind == "file":
            path.write_text(slot)
        elif kind == "dir":
            path.mkdir()
        elif kind == "symlink":
            path.symlink_to(target)
        elif os.path.isfile(target) and not os.path.islink(target):
            os.link(target, path)
    return root


def _real_dir(root: Path, path: Path) -> bool:
    """Whether ``path`` and every directory between it and ``root`` is a real directory."""
    while path != root:
        if path.is_symlink() or not path.is_dir():
            return False
        path = path.parent
    return True


def _names(root: Path) -> list[str]:
    """Every name below ``root`` that is not a directory, through symlinked
    directories too (those in the example's temporary directory: not the
    rest of the disk), to a bounded depth (loops end there)."""
    found, pending = [], [("", 0)]
    while pending:
        rel, depth = pending.pop()
        for name in sorted(os.listdir(root / rel)):
            child = f"{rel}/{name}" if rel else name
            if not os.path.isdir(root / child):
                found.append(child)
            elif depth < MAX_DEPTH and Path(os.path.realpath(root / child)).is_relative_to(root.parent):
                pending.append((child, depth + 1))
    return found


@settings(max_examples=60, deadline=None)
@given(entries=st.lists(ENTRY, max_size=10), follow_hardlinks=st.booleans())
@example(entries=[("symlink", "l", "../corpus/a")], follow_hardlinks=False)  # out of the root and back in
@example(entries=[("symlink", "l", "{root}2/a")], follow_hardlinks=False)  # the sibling named like the root
def test_the_walk_lists_only_what_resolves_inside_the_root(
    entries: list[tuple[str, str, str]], follow_hardlinks: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = _build(Path(tmp).resolve(), entries)
        for follow_symlinks in (False, True):
            policy = ExclusionPolicy(
                tuple(DEFAULT_PATH_EXCLUDES),
                (),
                follow_symlinks=follow_symlinks,
                follow_hardlinks=follow_hardlinks,
            )
            _assert_agree(ExclusionEngine(root, policy), root)


def _assert_agree(engine: ExclusionEngine, root: Path) -> None:
    walked = {item.rel_path for item in walk(engine) if isinstance(item, FileEntry)}
    for rel in walked:
        real = os.path.realpath(root / rel)
        assert Path(real).is_relative_to(root), rel
        assert engine.resolve(rel).path == Path(real), rel
    for rel in _names(root):
        if not Path(os.path.realpath(root / rel)).is_relative_to(root):
            assert rel not in walked, rel
            _assert_refused(engine, rel)
    _assert_plain_files_walked(engine, root, walked)


def _assert_refused(engine: ExclusionEngine, rel: str) -> None:
    try:
        engine.resolve(rel)
    except Dir2mcpError:
        return
    raise AssertionError(f"{rel} resolves outside the root, yet the resolver accepted it")


def _assert_plain_files_walked(engine: ExclusionEngine, root: Path, walked: set[str]) -> None:
    """So the property cannot hold by a walk that lists nothing: a regular
    file reached through real directories only, not excluded and with one
    name, is listed."""
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            st_ = path.lstat()
            if path.is_file() and not path.is_symlink() and st_.st_nlink == 1:
                assert (rel in walked) is (engine.excluded_reason(rel) is None), rel
