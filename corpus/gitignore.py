"""Git's ignore rules, as git applies them (issue #37: the files indexed are
the files git considers).

``git ls-files --cached --others --exclude-standard`` is the set of files git
considers part of a work tree: every tracked file, ignored or not, and every
untracked file no ignore rule matches. The rules, lowest precedence first:

1. the global excludes file (``core.excludesFile``, by default
   ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``),
2. ``$GIT_DIR/info/exclude``,
3. each ``.gitignore`` from the top of the work tree down to the file's
   directory (a deeper file wins; within a file the last match wins, so
   ``!pattern`` re-includes),

and nothing below an ignored directory can be re-included. This module reads
those sources; :class:`corpus.security.ExclusionEngine` applies them during
the walk and for every reader, so the one exclusion engine agrees with git
without walking the tree twice. Outside a git work tree only the in-tree
``.gitignore`` files apply, as before.

Git itself is asked two things, each cached: where the global excludes file
is (``git config``, which knows ``GIT_CONFIG_GLOBAL``, includes and the
repository's own config) and which files are tracked (``git ls-files``, only
once some rule excludes something). Without a ``git`` binary the default
global excludes path is used and no tracked file is exempt.
"""

from __future__ import annotations

import bisect
import os
import re
import stat
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pathspec
from pathspec.util import CheckResult, normalize_file

#: How long one ``git`` call may take before it is given up (seconds).
GIT_TIMEOUT = 20.0
#: ``git`` runs nothing the repository's config names (an fsmonitor hook):
#: a directory handed to dir2mcp is not trusted to run code.
_SAFE_GIT = ("git", "-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false")


@dataclass(frozen=True)
class GitignoreRule:
    """A parsed ignore file; its patterns apply to paths below ``base``.

    ``prefix`` is the root's path below the directory the patterns are
    relative to, for a file above the root (the work tree's top, when the
    root is a subdirectory of it, or ``info/exclude``).
    """

    base: str
    source: str
    spec: Rules
    prefix: str = ""


class Rules:
    """Gitignore-style rules (a ``pathspec.GitIgnoreSpec``) behind a one-regex
    pre-check: most paths match no rule, and pathspec tries each rule's
    regular expression in turn, in Python (the defaults alone are about 60).
    The pre-check tries them all at once, in the regex engine, and only a
    path it matches is judged rule by rule (last match wins, negations, the
    directory mark). Same answers, a fraction of the cost on a big tree."""

    __slots__ = ("_any", "patterns", "spec")

    def __init__(self, spec: pathspec.GitIgnoreSpec) -> None:
        self.spec = spec
        self.patterns = spec.patterns
        # Each rule names its directory-mark group; one name may appear only once.
        regexes = [
            _NAMED_GROUP.sub("(?:", p.regex.pattern)
            for p in spec.patterns
            if p.include is not None and p.regex is not None
        ]
        # "**/name" rules share their start: tried once, not once per rule (4x faster).
        deep = [regex.removeprefix(_ANY_DIR) for regex in regexes if regex.startswith(_ANY_DIR)]
        alternatives = [regex for regex in regexes if not regex.startswith(_ANY_DIR)]
        if deep:
            alternatives.append(f"{_ANY_DIR}(?:{'|'.join(deep)})")
        self._any = re.compile("|".join(f"(?:{a})" for a in alternatives)) if alternatives else None

    def check_file(self, path: str) -> CheckResult[str]:
        if self._any is None or not self._any.search(normalize_file(path)):
            return CheckResult(path, None, None)
        return self.spec.check_file(path)


_NAMED_GROUP = re.compile(r"\(\?P<\w+>")
#: How pathspec starts a rule that matches at any depth.
_ANY_DIR = "^(?:.+/)?"


def spec(lines: Iterable[str]) -> Rules:
    # pathspec's own regex engine: with google-re2 installed (the secret
    # rules') it would pick its RE2 backend, which cannot take a file name
    # that is not valid UTF-8 (a lone surrogate) and raises.
    return Rules(pathspec.GitIgnoreSpec.from_lines(lines, backend="simple"))


def gitignore_spec(lines: list[str]) -> Rules:
    """The rules of an ignore file, without the lines pathspec refuses (a
    trailing backslash, a lone ``!``, a reversed range): git ignores those
    too, and a file caught mid-write ends with any of them."""
    try:
        return spec(lines)
    except (ValueError, re.error):
        return spec([line for line in lines if _valid_line(line)])


def _valid_line(line: str) -> bool:
    try:
        spec([line])
    except (ValueError, re.error):
        return False
    return True


def load_rule(path: str, base: str, source: str, *, prefix: str = "") -> GitignoreRule | None:
    """The rules in the regular file ``path``; None when it cannot be read.

    Opened without blocking and checked on the descriptor: a FIFO named
    ``.gitignore`` must not hang a walk.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with open(fd, encoding="utf-8", errors="replace") as fh:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            rules = gitignore_spec(fh.read().splitlines())
        except OSError:
            return None
    return GitignoreRule(base=base, source=source, spec=rules, prefix=prefix)


def gitignore_reason(chain: tuple[GitignoreRule, ...], rel: str, *, is_dir: bool) -> str | None:
    """``gitignore: <source>`` when the deepest rule with an opinion on
    ``rel`` ignores it, as git decides; None when none does or one re-includes it."""
    for rule in reversed(chain):
        sub = rel[len(rule.base) + 1 :] if rule.base else rel
        if rule.prefix:
            sub = f"{rule.prefix}/{sub}" if sub else rule.prefix
        result = rule.spec.check_file(sub + "/" if is_dir else sub)
        if result.include is not None:
            return f"gitignore: {rule.source}" if result.include else None
    return None


# -- the repository ----------------------------------------------------------


def find_work_tree(root: str) -> tuple[str, str] | None:
    """The top of the git work tree holding ``root`` and its git directory,
    or None when ``root`` is in none. A ``.git`` file (a worktree or a
    submodule) names its git directory with ``gitdir:``."""
    current = root
    while True:
        dot_git = os.path.join(current, ".git")
        if os.path.isdir(dot_git):
            return current, dot_git
        if os.path.isfile(dot_git):
            git_dir = _gitdir_from_file(dot_git, current)
            if git_dir:
                return current, git_dir
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def _gitdir_from_file(path: str, top: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            first = fh.readline().strip()
    except OSError:
        return None
    if not first.startswith("gitdir:"):
        return None
    git_dir = first.removeprefix("gitdir:").strip()
    return os.path.normpath(os.path.join(top, git_dir))


def default_global_excludes(env: Mapping[str, str] = os.environ) -> str | None:
    """Where git looks for the global excludes file when ``core.excludesFile`` is unset."""
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg:
        return os.path.join(xdg, "git", "ignore")
    home = env.get("HOME")
    return os.path.join(home, ".config", "git", "ignore") if home else None


def _run_git(args: list[str], cwd: str) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(
            [*_SAFE_GIT, *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError):
        return None  # no git, or it hung: the defaults stand


_excludes_file_cache: dict[tuple[object, ...], str | None] = {}


def global_excludes_file(top: str) -> str | None:
    """The global excludes file git would read for the work tree at ``top``."""
    env = os.environ
    key: tuple[object, ...] = (
        top,
        *(env.get(name) for name in ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL")),
    )
    key += tuple(_stamp(path) for path in _config_files(top))
    if key not in _excludes_file_cache:
        _excludes_file_cache.clear()
        _excludes_file_cache[key] = _ask_excludes_file(top)
    return _excludes_file_cache[key]


def _config_files(top: str) -> list[str]:
    env = os.environ
    found = [os.path.join(top, ".git", "config")]
    if env.get("GIT_CONFIG_GLOBAL"):
        found.append(env["GIT_CONFIG_GLOBAL"])
    if env.get("HOME"):
        found.append(os.path.join(env["HOME"], ".gitconfig"))
    xdg = env.get("XDG_CONFIG_HOME") or (os.path.join(env["HOME"], ".config") if env.get("HOME") else "")
    if xdg:
        found.append(os.path.join(xdg, "git", "config"))
    return found


def _ask_excludes_file(top: str) -> str | None:
    done = _run_git(["config", "--path", "--get", "core.excludesFile"], top)
    if done is not None and done.returncode == 0:
        configured = os.fsdecode(done.stdout).strip()
        if configured:
            return configured if os.path.isabs(configured) else os.path.join(top, configured)
    return default_global_excludes()


#: A file's (mtime_ns, size, inode): whether it changed.
_Stamp = tuple[int, int, int]


def _stamp(path: str) -> _Stamp | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


@dataclass
class Repository:
    """The git work tree a root lies in: its outer rules and its tracked files."""

    root: str
    top: str
    git_dir: str
    #: the root's path below the work tree's top ("" when it is the top)
    prefix: str
    _rules: dict[str, tuple[_Stamp | None, GitignoreRule | None]] = field(default_factory=dict)

    @classmethod
    def find(cls, root: str) -> Repository | None:
        found = find_work_tree(root)
        if found is None:
            return None
        top, git_dir = found
        prefix = os.path.relpath(root, top).replace(os.sep, "/")
        return cls(root, top, git_dir, "" if prefix == "." else prefix)

    def outer_rules(self) -> tuple[GitignoreRule, ...]:
        """The rules that apply to the root from outside it, lowest precedence
        first: the global excludes file, ``info/exclude``, then the
        ``.gitignore`` of each directory from the top down to the root's parent."""
        rules = (self._rule(path, source, prefix) for path, source, prefix in self._outer_sources() if path)
        return tuple(rule for rule in rules if rule is not None)

    def _outer_sources(self) -> list[tuple[str | None, str, str]]:
        """``(path, source, prefix)`` of each file :meth:`outer_rules` reads."""
        sources = [
            (global_excludes_file(self.top), "core.excludesFile", self.prefix),
            (os.path.join(self.git_dir, "info", "exclude"), ".git/info/exclude", self.prefix),
        ]
        parts = self.prefix.split("/") if self.prefix else []
        for depth in range(len(parts)):
            above = "/".join(parts[:depth])
            source = f"../{above}/.gitignore" if above else "<work tree top>/.gitignore"
            sources.append((os.path.join(self.top, above, ".gitignore"), source, "/".join(parts[depth:])))
        return sources

    def rules_stamp(self) -> tuple[object, ...]:
        """What moves when git's rules for the root change from outside it:
        each file :meth:`outer_rules` reads (which one the global excludes
        file is, too). No watch of the root sees these: the watcher compares
        this stamp instead (found 2026-11-29). What git tracks (a tracked
        file is never excluded) is :meth:`tracked`'s."""
        return tuple((path, _stamp(path)) for path, _, _ in self._outer_sources() if path)

    def _rule(self, path: str, source: str, prefix: str) -> GitignoreRule | None:
        stamp = _stamp(path)
        cached = self._rules.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        rule = load_rule(path, "", source, prefix=prefix) if stamp is not None else None
        self._rules[path] = (stamp, rule)
        return rule

    def tracked(self) -> list[str]:
        """Every path git tracks below the root, relative to it, sorted; read
        again when git's index changes, and shared by every engine of the
        process (the watcher makes one per batch). Empty when git cannot tell."""
        stamp = _stamp(os.path.join(self.git_dir, "index"))
        cached = _TRACKED.get(self.root)
        if cached is None or cached[0] != stamp:
            cached = (stamp, _ls_files(self.root, ["--cached"]))
            _TRACKED.clear()  # one tree per process in practice: hold one list
            _TRACKED[self.root] = cached
        return cached[1]

    def is_tracked(self, rel: str, *, is_dir: bool) -> bool:
        """Whether git tracks ``rel`` (a directory: any file below it). A
        tracked file is part of the work tree whatever the ignore rules say."""
        tracked = self.tracked()
        if not tracked:
            return False
        key = rel + "/" if is_dir else rel
        at = bisect.bisect_left(tracked, key)
        return at < len(tracked) and (tracked[at].startswith(key) if is_dir else tracked[at] == key)


#: root -> (the stat of git's index, the paths it tracks below the root)
_TRACKED: dict[str, tuple[_Stamp | None, list[str]]] = {}


def _ls_files(cwd: str, options: list[str]) -> list[str]:
    done = _run_git(["ls-files", "-z", *options], cwd)
    if done is None or done.returncode != 0:
        return []
    return sorted(os.fsdecode(path) for path in done.stdout.split(b"\0") if path)


def git_files(root: str, *, others: bool = True) -> list[str] | None:
    """What git considers the work tree's files below ``root`` (tracked, and
    with ``others`` untracked files no rule ignores), relative to it, sorted;
    None outside a work tree or without git. The reference the index's
    coverage is compared with."""
    if find_work_tree(root) is None:
        return None
    untracked = ["--others", "--exclude-standard"] if others else []
    done = _run_git(["ls-files", "-z", "--cached", *untracked], root)
    if done is None or done.returncode != 0:
        return None
    return sorted({os.fsdecode(path) for path in done.stdout.split(b"\0") if path})
