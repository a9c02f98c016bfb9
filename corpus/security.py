"""The one exclusion engine, containment rule and path resolver (spec §7.1, §7.2, §17).

Ingestion asks :meth:`ExclusionEngine.excluded_reason` before reading a file,
and every tool that opens a user-named path goes through
:meth:`ExclusionEngine.resolve` (or :meth:`ExclusionEngine.open` to read it).
Whether an absolute path lies inside a directory is :func:`relative_within`
and :func:`is_within`, for everyone: the resolver, the walk, the watcher.
Keeping them here means a path rule added once applies everywhere; a second
copy of a check would be a future bypass.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote

from corpus import redaction
from corpus.gitignore import GitignoreRule, Repository, gitignore_reason, load_rule, spec
from corpus.redaction import Redacted
from kernel import errors
from kernel.config import DEFAULT_PATH_EXCLUDES, Config, secret_rule_names
from kernel.secret_scan import SecretScanner

DEFAULT_IGNORED_DIRS: frozenset[str] = frozenset(
    {".git", "node_modules", "dist", "build", ".venv", ".dir2mcp", "__pycache__"}
)
#: Default-ignored names that are build output only when git does not track
#: files in them: the kernel's tools/build is source, and git says so.
OUTPUT_DIR_NAMES: frozenset[str] = frozenset({"build", "dist"})
ARCHIVE_SEPARATOR = "!/"
_DRIVE_RE = re.compile(r"^[A-Za-z]:")

#: The longest relative path any surface takes (Linux's PATH_MAX), in characters,
#: and the most ``/``-separated segments in it (issue #34: a URI of 4,000
#: segments held a worker for 10 s). The tools' schemas state the same
#: bounds (mcp_gateway/schemas.py: path_argument); :func:`normalize_rel_path`
#: enforces them for every caller, whatever surface it came from.
MAX_PATH_CHARS = 4096
MAX_PATH_SEGMENTS = 256


@dataclass(frozen=True)
class ExclusionPolicy:
    path_excludes: tuple[str, ...]
    secret_patterns: tuple[str, ...]
    use_gitignore: bool = True
    follow_symlinks: bool = False
    follow_hardlinks: bool = False
    #: ``exclude`` (a file holding a credential is served nowhere) or ``redact``
    secret_mode: str = "exclude"

    @classmethod
    def from_config(cls, config: Config, *, root: Path | None = None) -> ExclusionPolicy:
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
            secret_mode=config.security.secret_mode,
        )


def _secret_file_excludes(config: Config, root: Path | None) -> tuple[str, ...]:
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
        rel = relative_within(os.path.abspath(path), os.path.abspath(root))
        if rel:
            patterns.append("/" + rel)
    return tuple(patterns)


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


def check_path_bounds(path: str, name: str = "path") -> None:
    """``INVALID_FIELD`` for a path past :data:`MAX_PATH_CHARS` characters or
    :data:`MAX_PATH_SEGMENTS` segments: the one bound on a path's size."""
    if len(path) > MAX_PATH_CHARS:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} is longer than {MAX_PATH_CHARS} characters")
    if path.count("/") >= MAX_PATH_SEGMENTS:
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"{name} has more than {MAX_PATH_SEGMENTS} segments")


def normalize_rel_path(rel_path: str) -> str:
    """Validate a user- or archive-supplied relative path and return it in canonical posix form.

    Raises ``PATH_OUTSIDE_ROOT`` for anything that could name a file outside
    its root, and ``INVALID_FIELD`` for an empty path or one past the bounds
    of :func:`check_path_bounds`.
    """
    if not isinstance(rel_path, str):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "path must be a string")
    check_path_bounds(rel_path)
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


def canonical_rel_path(rel_path: str) -> str:
    """``rel_path`` itself, if it is the one canonical name of what it names.

    Every path a client supplies must be: segments joined by single ``/``,
    with no ``.`` segment, no leading ``./`` and no trailing ``/``. So a
    file has one name on every surface, and what is echoed, cited, cached
    or subscribed to is that name. Besides :func:`normalize_rel_path`'s
    refusals, another spelling of a path inside the root is
    ``INVALID_FIELD``, naming the canonical form.
    """
    canonical = normalize_rel_path(rel_path)
    if canonical != rel_path:
        shown = canonical if len(canonical) <= 200 else canonical[:200] + "…"
        raise errors.Dir2mcpError(errors.INVALID_FIELD, f"path is not in canonical form; use {shown!r}")
    return canonical


def relative_within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> str | None:
    """``path`` as a posix path relative to ``root`` (``""`` for the root
    itself), or ``None`` if it does not lie inside: the one containment rule.

    Both must be absolute. They are compared component by component, so
    ``/a/root2`` is not inside ``/a/root``, trailing or doubled separators
    and ``.`` components do not matter, and every path is inside ``/``.
    The comparison is lexical and exact: pass real paths. A path with a
    ``..`` component, a relative one or one with a NUL byte is never inside,
    and case counts, so on a case-insensitive disk another spelling of the
    root is refused rather than guessed at.
    """
    parts, base = _components(path), _components(root)
    if parts is None or base is None or parts[: len(base)] != base:
        return None
    return "/".join(parts[len(base) :])


def is_within(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> bool:
    """Whether absolute ``path`` is ``root`` or lies below it (:func:`relative_within`)."""
    return relative_within(path, root) is not None


def _components(path: str | os.PathLike[str]) -> list[str] | None:
    path = os.fspath(path)
    if not path.startswith(os.sep) or "\x00" in path:
        return None
    parts = [part for part in path.split(os.sep) if part not in ("", ".")]
    return None if ".." in parts else parts


class _Pins(threading.local):
    """One thread's pinned block of :meth:`ExclusionEngine.pinned`: a
    thread's block is its own, neither seen nor ended by another's (a tool
    call's page of verdicts ran on the block another call's thread had
    begun, and judged by its memo or lost it half-way)."""

    dirs: dict[str, tuple[str | None, tuple[GitignoreRule, ...]]] | None = None
    rules: dict[str, GitignoreRule | None] | None = None
    outer: tuple[GitignoreRule, ...] | None = None


class IsDirectory(errors.Dir2mcpError):
    """A read of a directory: answered as a name that does not exist, since
    "is a directory" told a client guessing names that one exists, one only
    excluded files occupy included (session 29). A reader that knows the
    directory holds a file the client may see says so instead
    (:func:`corpus.files.read_settled`)."""

    def __init__(self, rel: str, real_rel: str) -> None:
        super().__init__(errors.FILE_NOT_FOUND, f"no such file: {rel}")
        self.rel, self.real_rel = rel, real_rel


def fold_case(text: str) -> str:
    """``text`` without case, one character for one: a character whose
    casefold is longer (``ß`` is ``ss``, ``İ`` an ``i`` and a dot, ``ﬁ`` is
    ``fi``) is kept as it is, so a rule's ``?`` or ``[ß]``, one character,
    matches the names it matched as written (until review 31b a folded
    ``keyß.pem`` was five characters and passed ``key?.pem``)."""
    folded = text.casefold()
    if len(folded) == len(text):  # no character grew (none folds to nothing): the usual name
        return folded
    return "".join(char if len(folded := char.casefold()) != 1 else folded for char in text)


class ExclusionEngine:
    """Decides what may be indexed or opened below ``root``."""

    @classmethod
    def from_config(cls, root: Path, config: Config, *, state_dir: Path | None = None) -> ExclusionEngine:
        """The engine every reader uses: ingestion and every file-reading tool."""
        return cls(root, ExclusionPolicy.from_config(config, root=root), state_dir=state_dir)

    def __init__(self, root: Path, policy: ExclusionPolicy, *, state_dir: Path | None = None) -> None:
        self.root = Path(root).resolve()
        self.policy = policy
        self._root_str = str(self.root)
        # Judged without case (both sides casefolded): a rule is about what a
        # file is (``*.pfx``, ``.npmrc``), which ``CERT.PFX`` or ``.NPMRC`` is too,
        # and a case-insensitive file system opens ``.npmrc`` for ``.NPMRC``.
        self._excludes = spec(fold_case(pattern) for pattern in policy.path_excludes)
        self._exclude_spelled = {fold_case(p): p for p in reversed(policy.path_excludes)}
        #: the git work tree the root lies in: its outer rules and tracked files
        self._repo = Repository.find(self._root_str) if policy.use_gitignore else None
        # All the rules in one linear-time pass (kernel/secret_scan.py).
        self._secrets = SecretScanner(policy.secret_patterns)
        self._rule_names = secret_rule_names(policy.secret_patterns)
        self._state_dir = self._state_dir_for(state_dir)
        self._gitignores: dict[str, tuple[int, int, GitignoreRule | None]] = {}
        # While pinned: each directory's verdict and .gitignore, judged once,
        # for the thread that pinned them (the engine serves every thread).
        self._pins = _Pins()
        #: whether the index's stored text of a path holds a credential under
        #: these rules (:class:`corpus.screen.SecretBearing`, set by the
        #: server's context): what a listing asks besides the rules
        self.stored_secret: Callable[[str], bool] | None = None
        #: judges a batch of paths a listing is about to ask about, a few
        #: queries for them all (:meth:`corpus.screen.SecretBearing.prime`)
        self.stored_prime: Callable[[Iterable[str]], None] | None = None

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Judge a batch of paths against the rules as they stand when it
        starts, as a walk is: each directory's verdict and ``.gitignore``
        are looked up once in the block, not once per path below them."""
        pins = self._pins
        if pins.dirs is not None:  # nested: the outer block rules
            yield
            return
        pins.dirs, pins.rules = {}, {}
        try:
            yield
        finally:
            pins.dirs = pins.rules = pins.outer = None

    def _state_dir_for(self, state_dir: Path | None) -> str | None:
        """The state directory's real path, if it lies below the root (not the root itself)."""
        if state_dir is None:
            return None
        real = str(Path(state_dir).resolve())
        return real if relative_within(real, self._root_str) else None

    # -- exclusion ---------------------------------------------------------

    def listed_reason(self, rel_path: str) -> str | None:
        """Why a listing leaves out the indexed file ``rel_path``, or None:
        the rules, then its stored text judged whole against the secret
        rules now (:attr:`stored_secret`). The index's verdict on a file's
        text is by the rules it was written under: until the walk a new
        secret pattern starts has re-read it (under ``up --no-index``,
        never), a listing named a file every read refused (session 30)."""
        reason = self.excluded_reason(rel_path)
        if reason is None and self.stored_secret is not None and self.stored_secret(rel_path):
            return f"{errors.SECRET_DETECTED}: content matches secret_patterns"
        return reason

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
            member = member.strip("/")
            reason = self._name_reason(member) or self._excludes_reason(
                member, is_dir=is_dir and index == len(members) - 1
            )
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
        if neither is), and the ``.gitignore`` chain that applies inside it.

        Each directory that exists is judged on its own, outermost first (a
        ``.gitignore`` inside it applies below it). From the first prefix
        that is not a directory on disk, nothing below exists to hold a
        ``.gitignore``, so the rest is judged in one step (:meth:`_rest_reason`).
        The cost is then linear in the length of a made-up path, where judging
        each of its prefixes was quadratic (issue #34: 4,000 segments, 10 s).
        """
        memo = self._pins.dirs
        reason, chain = None, self.gitignore_chain("")
        parts = dir_rel.split("/") if dir_rel else []
        prefix = ""
        for depth, part in enumerate(parts):
            prefix = f"{prefix}/{part}" if prefix else part
            verdict = memo.get(prefix) if memo is not None else None
            if verdict is _MISSING or (verdict is None and not self._is_dir(prefix)):
                if memo is not None:  # missing when the block began: so it stays within it
                    memo[prefix] = _MISSING
                return self._rest_reason(dir_rel, parts[depth:], chain), chain
            if verdict is None:
                reason = self.entry_reason(prefix, is_dir=True, chain=chain)
                verdict = (reason, chain if reason is not None else self.gitignore_chain(prefix, chain))
                if memo is not None:
                    memo[prefix] = verdict
            reason, chain = verdict
            if reason is not None:
                break
        return reason, chain

    def _is_dir(self, dir_rel: str) -> bool:
        try:
            return stat.S_ISDIR(os.stat(os.path.join(self._root_str, dir_rel)).st_mode)
        except (OSError, ValueError):
            return False

    def _rest_reason(self, dir_rel: str, rest: list[str], chain: tuple[GitignoreRule, ...]) -> str | None:
        """Why directory ``dir_rel`` is excluded, judged whole: a default-ignored
        name among its segments ``rest`` that do not exist, or a rule matching
        it (a rule that matches a directory matches everything below it, so the
        whole path answers for its prefixes)."""
        for name in rest:
            if name in DEFAULT_IGNORED_DIRS:
                return f"default ignore: {name}"
        return self.entry_reason(dir_rel, is_dir=True, chain=chain)

    def entry_reason(
        self, rel_path: str, *, is_dir: bool = False, chain: tuple[GitignoreRule, ...] = ()
    ) -> str | None:
        """Why this one entry is excluded, assuming its parent directories are allowed.

        Walkers prune excluded directories, so they only need this check;
        ``chain`` is :meth:`gitignore_chain` of the entry's parent directory.
        """
        name = rel_path.rpartition("/")[2]
        if is_dir and name in DEFAULT_IGNORED_DIRS and not self._tracked_source(name, rel_path):
            return f"default ignore: {name}"
        reason = self._name_reason(name)
        if reason is not None:
            return reason
        if self._state_dir is not None and is_within(os.path.join(self._root_str, rel_path), self._state_dir):
            return "state directory"
        reason = self._excludes_reason(rel_path, is_dir=is_dir)
        if reason is not None:
            return reason
        reason = gitignore_reason(chain, rel_path, is_dir=is_dir)
        if reason is not None and self._repo is not None and self._repo.is_tracked(rel_path, is_dir=is_dir):
            return None  # git tracks it: part of the work tree whatever the rules say
        return reason

    def _tracked_source(self, name: str, dir_rel: str) -> bool:
        """A ``build`` or ``dist`` directory git tracks files in: source, not output."""
        if name not in OUTPUT_DIR_NAMES or self._repo is None:
            return False
        return self._repo.is_tracked(dir_rel, is_dir=True)

    def _excludes_reason(self, rel: str, *, is_dir: bool) -> str | None:
        result = self._excludes.check_file(fold_case(rel + "/" if is_dir else rel))
        if result.include:
            assert result.index is not None  # a pattern decided it
            folded = str(self._excludes.patterns[result.index].pattern)
            return f"path_excludes: {self._exclude_spelled.get(folded, folded)}"
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
            parent_chain = self._outer_rules() if not dir_rel else self._chain_from_root(dir_rel)
        rule = self._gitignore_for(dir_rel)
        return parent_chain + (rule,) if rule else parent_chain

    def _chain_from_root(self, dir_rel: str) -> tuple[GitignoreRule, ...]:
        """The ``.gitignore`` files above ``dir_rel``, read down to the first
        directory that does not exist (nothing below it holds one)."""
        chain = self._outer_rules()
        prefix = ""
        for part in ["", *dir_rel.split("/")[:-1]]:
            prefix = f"{prefix}/{part}" if prefix else part
            if prefix and not self._is_dir(prefix):
                break
            rule = self._gitignore_for(prefix)
            chain = chain + (rule,) if rule else chain
        return chain

    def outer_rules_stamp(self) -> tuple[object, ...]:
        """What moves when the rules from outside the root do (git's global
        and ``info/exclude`` files, the ``.gitignore`` files above the root):
        :meth:`Repository.rules_stamp`; empty outside git."""
        return () if self._repo is None else self._repo.rules_stamp()

    def tracked(self) -> list[str]:
        """What git tracks below the root, sorted (:meth:`Repository.tracked`:
        the same list object until git's index changes); empty outside git."""
        return [] if self._repo is None else self._repo.tracked()

    def _outer_rules(self) -> tuple[GitignoreRule, ...]:
        """The git rules from outside the root (global excludes, ``info/exclude``,
        the ``.gitignore`` files above it), lowest precedence first."""
        if self._repo is None:
            return ()
        pins = self._pins
        if pins.rules is None:
            return self._repo.outer_rules()
        if pins.outer is None:
            pins.outer = self._repo.outer_rules()
        return pins.outer

    def _gitignore_for(self, dir_rel: str) -> GitignoreRule | None:
        pinned = self._pins.rules
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
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):  # a FIFO named .gitignore must not block a walk
            self._gitignores.pop(dir_rel, None)
            return None
        cached = self._gitignores.get(dir_rel)
        if cached and cached[:2] == (st.st_mtime_ns, st.st_size):
            return cached[2]
        rule = load_rule(path, dir_rel, f"{dir_rel}/.gitignore" if dir_rel else ".gitignore")
        self._gitignores[dir_rel] = (st.st_mtime_ns, st.st_size, rule)
        return rule

    # -- secrets -----------------------------------------------------------

    def find_secret(self, text: str) -> str | None:
        """Which secret pattern ``text`` matches, as ``secret_patterns[i]``; never the match itself."""
        index = self._secrets.first(text)
        return None if index is None else f"secret_patterns[{index}]"

    def find_secret_in_stream(self, read: Callable[[int], bytes], start: bytes = b"") -> str | None:
        """:meth:`find_secret` over a file read block by block (``read(size)``)."""
        index = self._secrets.first_in_stream(read, start)
        return None if index is None else f"secret_patterns[{index}]"

    @property
    def redacts(self) -> bool:
        """``security.secret_mode: redact``: a file holding a credential is
        served with it replaced rather than not at all (a name never is)."""
        return self.policy.secret_mode == "redact"

    def redact(self, text: str) -> Redacted | None:
        """``text`` with each credential replaced by ``[REDACTED:<rule>]``,
        line breaks kept (:func:`corpus.redaction.redact`); None when it
        cannot be made clean. The one redaction the indexer and every
        reader use."""
        return redaction.redact(self._secrets, text, self._rule_names)

    def _name_reason(self, name: str) -> str | None:
        """A file or directory name (or an archive member's path) that matches
        a secret rule: ``ghp_….md`` is refused like its content would be."""
        rule = self.find_secret(name)
        return None if rule is None else f"{errors.SECRET_DETECTED}: name matches {rule}"

    # -- resolution --------------------------------------------------------

    def resolve(self, rel_path: str) -> Resolved:
        """The one resolver: where a user-supplied relative path leads below the root.

        Raises ``INVALID_FIELD`` for a path not in canonical form
        (:func:`canonical_rel_path`), ``PATH_OUTSIDE_ROOT`` for a path or
        symlink that leaves the root, ``FORBIDDEN`` for an excluded path or target, a symlink the
        policy does not follow or a refused hard link, and
        ``FILE_NOT_FOUND`` for a missing entry or one that is neither a
        regular file nor a directory. For archive members (``a.zip!/x``)
        the archive itself is resolved. The result is only a name: it may
        be swapped once this returns, so nothing may *read* through it.
        Readers use :meth:`open`.
        """
        rel = canonical_rel_path(rel_path)
        self._forbid_excluded(rel)
        walked = self._walk(rel.partition(ARCHIVE_SEPARATOR)[0], rel)
        os.close(walked.fd)
        if walked.real_rel and stat.S_ISDIR(walked.st.st_mode):  # "node_modules" is excluded as a directory
            self._forbid_excluded(walked.real_rel, is_dir=True)
        path = self.root / walked.real_rel if walked.real_rel else self.root
        return Resolved(rel, walked.real_rel, path, walked.st)

    def open(self, rel_path: str, *, judged: bool = False) -> OpenedFile:
        """Open the regular file ``rel_path`` names, with no window for a swap.

        The one way a corpus file is read. Each component is opened relative
        to its parent's descriptor with ``O_NOFOLLOW`` (symlinks are resolved
        here, by the policy, never by the kernel), the last one with
        ``O_NONBLOCK``, and the type is checked on the opened descriptor: a
        FIFO, device or socket is ``FILE_NOT_FOUND`` "not a regular file",
        a directory :class:`IsDirectory`, and nothing ever blocks in ``open()``. For archive
        members (``a.zip!/x``) the archive is opened. ``judged``: the caller
        (the indexer's walk) has already applied the exclusion rules to
        ``rel_path``; a symlink's real target is judged either way.
        """
        rel = canonical_rel_path(rel_path)
        if not judged:
            self._forbid_excluded(rel)
        walked = self._walk(rel.partition(ARCHIVE_SEPARATOR)[0], rel)
        if not stat.S_ISREG(walked.st.st_mode):
            os.close(walked.fd)
            if stat.S_ISDIR(walked.st.st_mode):
                raise IsDirectory(rel, walked.real_rel)
            raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"{rel} is not a regular file")
        return OpenedFile(rel, walked.real_rel, walked.st, os.fdopen(walked.fd, "rb"))

    def _forbid_excluded(self, rel: str, *, is_dir: bool = False) -> None:
        reason = self.excluded_reason(rel, is_dir=is_dir)
        if reason is not None:
            raise errors.Dir2mcpError(errors.FORBIDDEN, f"path is excluded ({reason})")

    def _walk(self, rel: str, shown: str) -> _Walked:
        """Open normalised ``rel`` (no ``..``) beneath the root, one component
        at a time, each relative to the descriptor of the directory before it.

        A symlink is never followed by ``open()``: with ``follow_symlinks``
        its target is read and walked the same way (``..`` steps back along
        the directories actually opened, never above the root). On Linux the
        opened descriptor's path is checked last, so a directory moved out of
        the root mid-walk is caught too. Returns the open descriptor of the
        final entry (the caller closes it), its ``fstat`` and its real path.
        """
        try:
            dirs = [os.open(self._root_str, _DIR_FLAGS)]
        except OSError as exc:
            raise errors.Dir2mcpError(
                errors.ROOT_INACCESSIBLE, f"cannot open the root: {exc.strerror}"
            ) from None
        names: list[str] = []
        pending = rel.split("/")[::-1]
        links = 0
        fd = -1
        try:
            while pending:
                part = pending.pop()
                if part in ("", "."):
                    continue
                if part == "..":  # only from a symlink's target: the user's path has none
                    if not names:
                        raise _outside("symlink points outside the root")
                    os.close(dirs.pop())
                    names.pop()
                    continue
                try:
                    fd = self._open_component(dirs[-1], part, last=not pending)
                except _IsLink as link:
                    links += 1
                    if links > _MAX_LINKS:
                        raise errors.Dir2mcpError(
                            errors.FILE_NOT_FOUND, f"{LINK_LOOP_REASON}: {shown}"
                        ) from None
                    if link.target.startswith("/"):
                        for extra in dirs[1:]:
                            os.close(extra)
                        del dirs[1:]
                        names.clear()
                        pending.extend(self._inside_parts(link.target)[::-1])
                    else:
                        pending.extend(link.target.split("/")[::-1])
                    continue
                except PermissionError:
                    raise errors.Dir2mcpError(errors.FORBIDDEN, f"{PERMISSION_REASON}: {shown}") from None
                except OSError:
                    raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"no such file: {shown}") from None
                names.append(part)
                if pending:
                    dirs.append(fd)
                    fd = -1
            if fd < 0:  # a link's target ended in ".." or named the root: the last directory reached
                fd = dirs.pop() if len(dirs) > 1 else os.dup(dirs[0])
            st = os.fstat(fd)
            real_rel = "/".join(names)
            self._check_opened(fd)
            if links and real_rel:  # judge the real target too: "link" may name ".env"
                self._forbid_excluded(real_rel, is_dir=stat.S_ISDIR(st.st_mode))
            if self.hardlink_refused(st):
                raise errors.Dir2mcpError(errors.FORBIDDEN, HARDLINK_REASON)
            kernel = kernel_file_system(st.st_dev)
            if kernel:
                raise errors.Dir2mcpError(errors.FORBIDDEN, f"{KERNEL_FS_REASON} ({kernel}): {shown}")
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        finally:
            for opened in dirs:
                os.close(opened)
        return _Walked(fd, st, real_rel)

    def _open_component(self, parent: int, part: str, *, last: bool) -> int:
        """One component, opened relative to ``parent``; raises :class:`_IsLink` for a symlink."""
        if last:
            # Look first, so a FIFO or device is never even opened; the type
            # that counts is the descriptor's, checked by the caller.
            st = os.stat(part, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise _IsLink(self._link_target(parent, part))
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise errors.Dir2mcpError(errors.FILE_NOT_FOUND, f"{part} is not a regular file")
        try:
            return os.open(part, _DIR_FLAGS | os.O_NOFOLLOW if not last else _LEAF_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:  # O_NOFOLLOW met a symlink (ELOOP, or ENOTDIR with O_DIRECTORY)?
                target = os.readlink(part, dir_fd=parent)
            except OSError:
                raise exc from None
        if not self.policy.follow_symlinks:
            raise errors.Dir2mcpError(errors.FORBIDDEN, "symlinks are not followed")
        raise _IsLink(target)

    def _link_target(self, parent: int, part: str) -> str:
        if not self.policy.follow_symlinks:
            raise errors.Dir2mcpError(errors.FORBIDDEN, "symlinks are not followed")
        return os.readlink(part, dir_fd=parent)

    def _inside_parts(self, target: str) -> list[str]:
        """An absolute symlink target as components below the root, or ``PATH_OUTSIDE_ROOT``.

        A target spelled through another name of the root (a symlinked
        ancestor) is accepted by its real path; the components are then
        opened beneath the root like any others, so what that lookup saw
        cannot redirect the open.
        """
        for candidate in (os.path.normpath(target), os.path.realpath(target)):
            rest = relative_within(candidate, self._root_str)
            if rest is not None:
                return rest.split("/") if rest else []
        raise _outside("symlink points outside the root")

    def _check_opened(self, fd: int) -> None:
        """Where the kernel says the descriptor is (Linux): a directory moved
        out of the root while it was being walked is refused."""
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc: the walk alone decides
        if where.startswith("/") and not is_within(where.removesuffix(" (deleted)"), self._root_str):
            raise _outside("path resolves outside the root")

    def hardlink_refused(self, st: os.stat_result) -> bool:
        """A regular file with other names, which may lie outside the root."""
        return stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and not self.policy.follow_hardlinks


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
#: A pinned verdict: this prefix was no directory when the block began.
_MISSING = (None, ())
_LEAF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_MAX_LINKS = 40


class _IsLink(Exception):  # noqa: N818 (control flow, never raised out of the walk)
    def __init__(self, target: str) -> None:
        self.target = target


@dataclass(frozen=True)
class Resolved:
    """Where :meth:`ExclusionEngine.resolve` found a path to lead.

    ``rel`` is the path asked for in canonical form (what callers name it
    by), ``real_rel`` the entry it reached below the root after symlinks
    (``""`` for the root), ``path`` that entry's absolute path, and ``st``
    the ``fstat`` of the entry as it was opened.
    """

    rel: str
    real_rel: str
    path: Path
    st: os.stat_result


@dataclass(frozen=True)
class _Walked:
    fd: int
    st: os.stat_result
    real_rel: str


@dataclass
class OpenedFile:
    """A corpus file opened by :meth:`ExclusionEngine.open`; use it as a context manager.

    ``st`` is the descriptor's ``fstat``: the size and mtime of exactly
    what ``file`` reads.
    """

    rel: str
    real_rel: str
    st: os.stat_result
    file: BinaryIO = field(repr=False)

    def __enter__(self) -> OpenedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()

    def read(self, size: int = -1) -> bytes:
        return self.file.read(size)


#: The messages of the resolver's refusals a walk reports as problems
#: (beside ``PATH_OUTSIDE_ROOT``); each message starts with its constant.
LINK_LOOP_REASON = "too many levels of symbolic links"
KERNEL_FS_REASON = "a file of a kernel file system, not a document"
#: File systems whose files are the machine's live state, not documents:
#: ``/proc/<pid>/environ`` is a process's environment (the server's own
#: tokens and keys), ``/sys`` and ``/dev`` the hardware. Their files pass as
#: regular ones (size 0, read as generated), so a root holding such a mount
#: (``/`` itself, a chroot or container tree with ``proc`` mounted) served
#: them until session 21; now no file on one is opened.
KERNEL_FILE_SYSTEMS = frozenset(
    {
        "proc", "sysfs", "devtmpfs", "devpts", "debugfs", "tracefs", "securityfs", "cgroup", "cgroup2",
        "pstore", "bpf", "configfs", "efivarfs", "fusectl", "hugetlbfs", "mqueue", "binfmt_misc",
        "autofs", "rpc_pipefs", "nsfs", "selinuxfs", "nfsd",
    }
)  # fmt: skip
_MOUNTINFO = "/proc/self/mountinfo"
_MOUNTS_FRESH_SECONDS = 2.0


class _Mounts:
    """Each mounted file system's type by device number, read from
    ``/proc/self/mountinfo`` (again when a device is unknown, or 2 s old)."""

    lock = threading.Lock()
    types: dict[int, str] = {}
    read_at = -_MOUNTS_FRESH_SECONDS

    @classmethod
    def type_of(cls, dev: int) -> str:
        with cls.lock:
            now = time.monotonic()
            if dev not in cls.types or now - cls.read_at >= _MOUNTS_FRESH_SECONDS:
                cls.types, cls.read_at = _read_mounts(), now
            # a device mountinfo does not name (a btrfs subvolume's) is no kernel
            # file system: remembered as such until the next reading
            return cls.types.setdefault(dev, "")


def _read_mounts() -> dict[int, str]:
    """``major:minor`` (field 3) and the type (the first field after " - ") of each mount."""
    try:
        with open(_MOUNTINFO, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return {}  # no /proc here: no kernel file system of the kind mounted either
    found: dict[int, str] = {}
    for line in lines:
        fields, _, after = line.partition(" - ")
        parts = fields.split()
        major, _, minor = parts[2].partition(":") if len(parts) > 2 else ("", "", "")
        if major.isdigit() and minor.isdigit() and after:
            found[os.makedev(int(major), int(minor))] = after.split()[0]
    return found


def kernel_file_system(dev: int) -> str | None:
    """The type of the kernel file system (``proc``, ``sysfs``, …) device
    ``dev`` is, or None for any other (a disk's, tmpfs, NFS, FUSE)."""
    kind = _Mounts.type_of(dev)
    return kind if kind in KERNEL_FILE_SYSTEMS else None


PERMISSION_REASON = "permission denied"
HARDLINK_REASON = (
    "hard link: the file has other names, which may lie outside the root; "
    "set ingest.follow_hardlinks: true to index it"
)
