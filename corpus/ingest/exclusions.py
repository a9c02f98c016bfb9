"""What a walk leaves out, counted by reason (issue #37).

Kept free of Django: the walk (corpus/ingest/discover.py) counts into an
:class:`ExclusionTally` as it prunes, and runs where no app is loaded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from corpus import errors

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

    files: Counter = field(default_factory=Counter)
    dirs: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)

    def add(self, reason: str, *, is_dir: bool) -> None:
        (self.dirs if is_dir else self.files)[reason_kind(reason)] += 1
        self.reasons[reason] += 1

    def by_kind(self) -> dict[str, dict[str, int]]:
        kinds = sorted(set(self.files) | set(self.dirs))
        return {kind: {"files": self.files[kind], "dirs": self.dirs[kind]} for kind in kinds}
