"""The one exclusion engine and path resolver (spec §7.1, §7.2, §17).

Ingestion asks :meth:`ExclusionEngine.excluded_reason` before reading a file,
and every tool that opens a user-named path goes through
:meth:`ExclusionEngine.resolve`. Keeping both here means a path rule added
once applies everywhere; a second copy of a check would be a future bypass.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pathspec

from corpus import errors, literals
from corpus.config import DEFAULT_PATH_EXCLUDES

DEFAULT_IGNORED_DIRS: frozenset[str] = frozenset(
    {".git", "node_modules", "dist", "build", ".venv", ".dir2mcp", "__pycache__"}
)
ARCHIVE_SEPARATOR = "!/"
_DRIVE_RE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
class ExclusionPolicy:
    path_excludes: tuple[str, ...]
    secret_patterns: tuple[str, ...]
    use_gitignore: bool = True
    follow_symlinks: bool = False
    follow_hardlinks: bool = False

    @classmethod
    def from_config(cls, config, *, root: Path | None = None) -> ExclusionPolicy:
        """The policy of ``config``; with ``root``, its secret files are excluded too."""
        # The defaults always apply, then the user's entries: setting
        # path_excludes adds to them (a "!pattern" entry can re-include a path),
        # so a one-line config can't silently expose .env or private keys.
        excludes = tuple(dict.fromkeys([*DEFAULT_PATH_EXCLUDES, *config.security.path_excludes]))
        return cls(
            path_excludes=excludes + _secret_file_excludes(config, root),
            secret_patterns=tuple(config.security.secret_patterns),
            use_gitignore=config.ingest.gitignore,
            follow_symlinks=config.ingest.follow_symlinks,
            follow_hardlinks=config.ingest.follow_hardlinks,
        )


def _secret_file_excludes(config, root: Path | None) -> tuple[str, ...]:
    """Anchored patterns for the configured secret and token files under ``root``.

    They may sit anywhere (``secrets.file.path: secret.env``), where no
    default exclude covers them, and they hold keys the content patterns
    do not recognise.
    """
    if root is None:
        return ()
    patterns = []
    for configured in (config.secrets.file.path, config.security.auth.token_file):
        if not configured:
            continue
        path = Path(configured).expanduser()
        path = path if path.is_absolute() else root / path
        try:
            rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
        except ValueError:
            continue
        if rel != ".." and not rel.startswith(".." + os.sep):
            patterns.append("/" + Path(rel).as_posix())
    return tuple(patterns)


@dataclass(frozen=True)
class GitignoreRule:
    """A parsed ``.gitignore``; its patterns apply to paths below ``base``."""

    base: str
    source: str
    spec: pathspec.GitIgnoreSpec


def _outside(message: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(errors.PATH_OUTSIDE_ROOT, message)


def _check_lexical(path: str) -> None:
    if "\x00" in path:
        raise _outside("path contains a NUL byte")
    if "\\" in path or _DRIVE_RE.match(path):
        raise _outside("path uses Windows separators or a drive letter")
    if path.startswith("/"):
        raise _outside("path must be relative to the root")
    if ".." in path.split("/"):
        raise _outside("path must not contain '..'")


def _fully_unquoted(path: str) -> str:
    # Decode repeatedly so double-encoded forms such as %252e%252e cannot
    # slip past a consumer that decodes once more than we do.
    for _ in range(4):
        decoded = unquote(path)
        if decoded == path:
            break
        path = decoded
    return path


def normalize_rel_path(rel_path: str) -> str:
    """Validate a user- or archive-supplied relative path and return it in canonical posix form.

    Raises ``PATH_OUTSIDE_ROOT`` for anything that could name a file outside
    its root, and ``INVALID_FIELD`` for an empty path.
    """
    if not isinstance(rel_path, str):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "path must be a string")
    _check_lexical(rel_path)
    decoded = _fully_unquoted(rel_path)
    if decoded != rel_path:
        try:
            _check_lexical(decoded)
        except errors.Dir2mcpError:
            raise _outside("path contains percent-encoded traversal") from None
        if decoded.count("/") != rel_path.count("/"):
            raise _outside("path contains a percent-encoded separator")
    parts = [part for part in rel_path.split("/") if part not in ("", ".")]
    if not parts:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "path is empty")
    return "/".join(parts)


def _is_under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _is_rel_under(rel: str, base: str) -> bool:
    return rel == base or rel.startswith(base + "/")


class ExclusionEngine:
    """Decides what may be indexed or opened below ``root``."""

    @classmethod
    def from_config(cls, root: Path, config, *, state_dir: Path | None = None) -> ExclusionEngine:
        """The engine every reader uses: ingestion and every file-reading tool."""
        return cls(root, ExclusionPolicy.from_config(config, root=root), state_dir=state_dir)

    def __init__(self, root: Path, policy: ExclusionPolicy, *, state_dir: Path | None = None):
        self.root = Path(root).resolve()
        self.policy = policy
        self._root_str = str(self.root)
        self._excludes = pathspec.GitIgnoreSpec.from_lines(policy.path_excludes)
        # Each rule with the test of the words every match holds (corpus/literals.py).
        self._secrets = tuple((rx, literals.prefilter(rx)) for rx in map(re.compile, policy.secret_patterns))
        self._state_rel = self._state_rel_for(state_dir)
        self._gitignores: dict[str, tuple[int, int, GitignoreRule | None]] = {}
        # While pinned: each directory's verdict and .gitignore, judged once.
        self._pinned_dirs: dict[str, tuple[str | None, tuple[GitignoreRule, ...]]] | None = None
        self._pinned_rules: dict[str, GitignoreRule | None] | None = None

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Judge a batch of paths against the rules as they stand when it
        starts, as a walk is: each directory's verdict and ``.gitignore``
        are looked up once in the block, not once per path below them."""
        if self._pinned_dirs is not None:  # nested: the outer block rules
            yield
            return
        self._pinned_dirs, self._pinned_rules = {}, {}
        try:
            yield
        finally:
            self._pinned_dirs = self._pinned_rules = None

    def _state_rel_for(self, state_dir: Path | None) -> str | None:
        if state_dir is None:
            return None
        try:
            rel = Path(state_dir).resolve().relative_to(self.root).as_posix()
        except ValueError:
            return None
        return None if rel == "." else rel

    # -- exclusion ---------------------------------------------------------

    def excluded_reason(self, rel_path: str, *, is_dir: bool = False) -> str | None:
        """Why ``rel_path`` is excluded, or ``None`` if it may be read.

        Archive members (``a.zip!/x``) are judged by the archive's path and,
        against ``path_excludes``, by each member path inside it.
        """
        outer, *members = rel_path.split(ARCHIVE_SEPARATOR)
        reason = self._path_reason(outer.strip("/"), is_dir=is_dir and not members)
        if reason is not None:
            return reason
        for index, member in enumerate(members):
            reason = self._excludes_reason(member.strip("/"), is_dir=is_dir and index == len(members) - 1)
            if reason is not None:
                return reason
        return None

    def _path_reason(self, rel: str, *, is_dir: bool) -> str | None:
        if not rel:
            return None
        parent, _, _ = rel.rpartition("/")
        reason, chain = self._dir_verdict(parent)
        return reason if reason is not None else self.entry_reason(rel, is_dir=is_dir, chain=chain)

    def _dir_verdict(self, dir_rel: str) -> tuple[str | None, tuple[GitignoreRule, ...]]:
        """Why directory ``dir_rel`` or one above it is excluded (``None``
        if neither is), and the ``.gitignore`` chain that applies inside it."""
        memo = self._pinned_dirs
        reason, chain = None, self.gitignore_chain("")
        parts = dir_rel.split("/") if dir_rel else []
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            verdict = memo.get(prefix) if memo is not None else None
            if verdict is None:
                reason = self.entry_reason(prefix, is_dir=True, chain=chain)
                verdict = (reason, chain if reason is not None else self.gitignore_chain(prefix, chain))
                if memo is not None:
                    memo[prefix] = verdict
            reason, chain = verdict
            if reason is not None:
                break
        return reason, chain

    def entry_reason(
        self, rel_path: str, *, is_dir: bool = False, chain: tuple[GitignoreRule, ...] = ()
    ) -> str | None:
        """Why this one entry is excluded, assuming its parent directories are allowed.

        Walkers prune excluded directories, so they only need this check;
        ``chain`` is :meth:`gitignore_chain` of the entry's parent directory.
        """
        name = rel_path.rpartition("/")[2]
        if is_dir and name in DEFAULT_IGNORED_DIRS:
            return f"default ignore: {name}"
        if self._state_rel is not None and _is_rel_under(rel_path, self._state_rel):
            return "state directory"
        reason = self._excludes_reason(rel_path, is_dir=is_dir)
        if reason is not None:
            return reason
        return _gitignore_reason(chain, rel_path, is_dir=is_dir)

    def _excludes_reason(self, rel: str, *, is_dir: bool) -> str | None:
        result = self._excludes.check_file(rel + "/" if is_dir else rel)
        if result.include:
            return f"path_excludes: {self._excludes.patterns[result.index].pattern}"
        return None

    def gitignore_chain(
        self, dir_rel: str, parent_chain: tuple[GitignoreRule, ...] | None = None
    ) -> tuple[GitignoreRule, ...]:
        """The ``.gitignore`` files that apply inside ``dir_rel``, outermost first.

        Pass the parent directory's chain to avoid re-reading the ancestors.
        """
        if not self.policy.use_gitignore:
            return ()
        if parent_chain is None:
            parent_chain = () if not dir_rel else self._chain_from_root(dir_rel)
        rule = self._gitignore_for(dir_rel)
        return parent_chain + (rule,) if rule else parent_chain

    def _chain_from_root(self, dir_rel: str) -> tuple[GitignoreRule, ...]:
        parts = dir_rel.split("/")
        chain: tuple[GitignoreRule, ...] = ()
        for depth in range(len(parts)):
            rule = self._gitignore_for("/".join(parts[:depth]))
            chain = chain + (rule,) if rule else chain
        return chain

    def _gitignore_for(self, dir_rel: str) -> GitignoreRule | None:
        pinned = self._pinned_rules
        if pinned is not None:
            if dir_rel not in pinned:
                pinned[dir_rel] = self._read_gitignore(dir_rel)
            return pinned[dir_rel]
        return self._read_gitignore(dir_rel)

    def _read_gitignore(self, dir_rel: str) -> GitignoreRule | None:
        path = os.path.join(self._root_str, dir_rel, ".gitignore")
        try:
            st = os.stat(path)
        except OSError:
            self._gitignores.pop(dir_rel, None)
            return None
        cached = self._gitignores.get(dir_rel)
        if cached and cached[:2] == (st.st_mtime_ns, st.st_size):
            return cached[2]
        rule = _load_gitignore(path, dir_rel)
        self._gitignores[dir_rel] = (st.st_mtime_ns, st.st_size, rule)
        return rule

    # -- secrets -----------------------------------------------------------

    def find_secret(self, text: str) -> str | None:
        """Which secret pattern ``text`` matches, as ``secret_patterns[i]``; never the match itself."""
        lowered = literals.lowered_if_ascii(text)
        for index, (pattern, may_match) in enumerate(self._secrets):
            if may_match(text, lowered) and pattern.search(text):
                return f"secret_patterns[{index}]"
        return None

    # -- resolution --------------------------------------------------------

    def resolve(self, rel_path: str) -> Path:
        """Turn a user-supplied relative path into an absolute path under root.

        For archive members (``a.zip!/x``) the archive itself is returned.
        """
        rel = normalize_rel_path(rel_path)
        self._forbid_excluded(rel)
        real = self._walk_components(rel.partition(ARCHIVE_SEPARATOR)[0])
        # Judge the real target too: with symlinks followed, "link" may name ".env".
        real_rel = Path(real).relative_to(self.root).as_posix()
        is_dir = os.path.isdir(real)
        if real_rel != "." and (real_rel != rel or is_dir):  # else: judged just above
            self._forbid_excluded(real_rel, is_dir=is_dir)
        return Path(real)

    def _forbid_excluded(self, rel: str, *, is_dir: bool = False) -> None:
        reason = self.excluded_reason(rel, is_dir=is_dir)
        if reason is not None:
            raise errors.Dir2mcpError(errors.FORBIDDEN, f"path is excluded ({reason})")

    def _walk_components(self, rel: str) -> str:
        """The real path of normalised ``rel`` (no ``..``), checked component
        by component."""
        current = self._root_str
        linked = False
        for part in rel.split("/"):
            current = os.path.join(current, part)
            try:
                st = os.lstat(current)
            except PermissionError:
                raise errors.Dir2mcpError(errors.FORBIDDEN, f"permission denied: {rel}") from None
            except OSError:
                raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"no such file: {rel}") from None
            if stat.S_ISLNK(st.st_mode):
                current = self._follow(current)
                linked = True
        real = current
        if linked:  # with no link on the way, the joined path is the real one and st its stat
            real = os.path.realpath(current)
            if not _is_under(real, self._root_str):
                raise _outside("path resolves outside the root")
            try:
                st = os.stat(real)
            except OSError:
                return real
        if self.hardlink_refused(st):
            raise errors.Dir2mcpError(errors.FORBIDDEN, HARDLINK_REASON)
        return real

    def hardlink_refused(self, st: os.stat_result) -> bool:
        """A regular file with other names, which may lie outside the root."""
        return stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not self.policy.follow_hardlinks

    def _follow(self, link: str) -> str:
        if not self.policy.follow_symlinks:
            raise errors.Dir2mcpError(errors.FORBIDDEN, "symlinks are not followed")
        target = os.path.realpath(link)
        if not _is_under(target, self._root_str):
            raise _outside("symlink points outside the root")
        if not os.path.exists(target):
            raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, "symlink target does not exist")
        return target


HARDLINK_REASON = (
    "hard link: the file has other names, which may lie outside the root; "
    "set ingest.follow_hardlinks: true to index it"
)


def _load_gitignore(path: str, dir_rel: str) -> GitignoreRule | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            spec = pathspec.GitIgnoreSpec.from_lines(fh.read().splitlines())
    except OSError:
        return None
    source = f"{dir_rel}/.gitignore" if dir_rel else ".gitignore"
    return GitignoreRule(base=dir_rel, source=source, spec=spec)


def _gitignore_reason(chain: tuple[GitignoreRule, ...], rel: str, *, is_dir: bool) -> str | None:
    # Like git, the deepest .gitignore with an opinion wins, so a nested
    # "!pattern" can re-include what an outer file ignored.
    for rule in reversed(chain):
        sub = rel[len(rule.base) + 1 :] if rule.base else rel
        result = rule.spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            return f"gitignore: {rule.source}" if result.include else None
    return None
