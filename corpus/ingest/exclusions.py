"""What a walk leaves out, counted by reason, and when coverage looks wrong (issue #37).

Kept free of Django: the walk (corpus/ingest/discover.py) counts into an
:class:`ExclusionTally` as it prunes, and runs where no app is loaded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kernel import errors

#: An index this many times the files git tracks, and at least
#: MUCH_LARGER_MIN files more, is "much larger" than the work tree.
MUCH_LARGER_RATIO = 2.0
MUCH_LARGER_MIN = 1000
#: Reasons shown beside a warning, the most frequent first.
SHOWN_SOURCES = 5

#: A walk's reason (corpus/security.py's wording) by its start, and its kind.
_WALK_KINDS = (
    ("gitignore:", "gitignore"),
    ("default ignore:", "default_ignore"),
    ("path_excludes:", "path_excludes"),
    (f"{errors.SECRET_DETECTED}:", "secret_name"),
    ("state directory", "state_dir"),
    ("symlink", "symlink"),
)


def reason_kind(reason: str) -> str:
    """The kind of an exclusion reason: ``gitignore``, ``default_ignore``,
    ``path_excludes``, ``secret_name``, ``state_dir``, ``symlink`` or ``other``."""
    for start, kind in _WALK_KINDS:
        if reason.startswith(start):
            return kind
    return "other"


@dataclass
class ExclusionTally:
    """What one walk left out: files and directories (a pruned directory
    counts once; what is below it is not walked) by kind, and the exact
    reasons (``gitignore: src/.gitignore``) by how many entries each took."""

    files: Counter[str] = field(default_factory=Counter)
    dirs: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, reason: str, *, is_dir: bool) -> None:
        (self.dirs if is_dir else self.files)[reason_kind(reason)] += 1
        self.reasons[reason] += 1

    def by_kind(self) -> dict[str, dict[str, int]]:
        kinds = sorted(set(self.files) | set(self.dirs))
        return {kind: {"files": self.files[kind], "dirs": self.dirs[kind]} for kind in kinds}


def coverage_warning(
    walked: int, *, indexed: int, git_tracked: int | None, tally: ExclusionTally | None = None
) -> str:
    """The loud line for an index that covers nothing or far more than git
    tracks; empty when the coverage looks sound."""
    shown = _top_reasons(tally)
    if walked == 0:
        where = f"; excluded: {shown}" if shown else ""
        tracked = f" (git tracks {git_tracked} files here)" if git_tracked else ""
        return (
            f"the index holds 0 files: the walk found no file to index{tracked}{where}. "
            "Check the .gitignore files (a top-level '/*' ignores everything) and security.path_excludes"
        )
    if indexed == 0:
        return f"the index holds 0 files: all {walked} files found were skipped (status shows why, by kind)"
    if git_tracked is not None and _much_larger(walked, git_tracked):
        return (
            f"the index holds {walked} files but git tracks only {git_tracked} here: untracked files no "
            ".gitignore rule excludes (build output, downloads, data?) are indexed; add them to .gitignore "
            "or security.path_excludes"
        )
    return ""


def _much_larger(walked: int, git_tracked: int) -> bool:
    return walked >= MUCH_LARGER_RATIO * git_tracked and walked - git_tracked >= MUCH_LARGER_MIN


def _top_reasons(tally: ExclusionTally | None) -> str:
    if tally is None or not tally.reasons:
        return ""
    return ", ".join(f"{reason} ({n})" for reason, n in tally.reasons.most_common(SHOWN_SOURCES))
