"""What the index covers of the tree, and what it left out by reason (issue #37).

The walk counts each entry the exclusion engine refuses (:class:`ExclusionTally`);
the indexer records the tally at the end of a whole walk with the number of
files git tracks below the root (:func:`record`), and ``status``, ``stats``
and the ``up`` output show it (:func:`summary`), with the files a policy
skipped after reading them (too large, binary, holding a secret) counted
from the store. An index that ends with no file, or with far more files than
git tracks, gets a loud :func:`coverage_warning`: a top-level ``.gitignore``
of ``/*`` (Debian's kernel tarball carries one) silently excludes everything,
and a build directory nobody ignored silently doubles the tree.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from django.db.models import Count

from corpus.gitignore import git_files
from corpus.ingest.exclusions import SHOWN_SOURCES, ExclusionTally, coverage_warning
from corpus.models import Document
from corpus.store import get_json_setting, set_setting
from kernel import errors
from kernel.jsontypes import JsonObject

#: settings key: the last whole walk's coverage (JSON)
COVERAGE_KEY = "walk_coverage"
#: A skipped document's error code, and its kind.
_SKIP_KINDS = {
    errors.FILE_TOO_LARGE: "size_cap",
    errors.BINARY_SKIPPED: "binary",
    errors.SECRET_DETECTED: "secret",
    errors.DOC_TYPE_UNSUPPORTED: "unsupported",
}


def record(root: Path, tally: ExclusionTally, *, walked: int) -> JsonObject:
    """Store a whole walk's coverage (what it found, what it left out, what
    git tracks below ``root``) and return it, with its warning."""
    tracked = git_files(str(root), others=False)
    git_tracked = None if tracked is None else len(tracked)
    indexed = indexed_documents()
    found = {
        "walked_files": walked,
        "indexed_files": indexed,
        "git_tracked_files": git_tracked,
        "excluded": tally.by_kind(),
        "excluded_reasons": dict(tally.reasons.most_common(SHOWN_SOURCES * 4)),
        "skipped": skipped_by_kind(),
        "warning": coverage_warning(walked, indexed=indexed, git_tracked=git_tracked, tally=tally),
        "recorded_unix": time.time(),
    }
    set_setting(COVERAGE_KEY, json.dumps(found))
    return found


def indexed_documents() -> int:
    """Live files whose text is indexed (not skipped, not in error)."""
    return Document.objects.filter(deleted=False).exclude(status__in=("skipped", "error")).count()


def skipped_by_kind() -> dict[str, int]:
    """Live documents a policy skipped after reading them, by kind (size cap, binary, secret ...)."""
    rows = (
        Document.objects.filter(deleted=False, status="skipped")
        .values("error_code")
        .annotate(n=Count("doc_id"))
        .order_by("error_code")
    )
    counts: Counter[str] = Counter()
    for row in rows:
        # No code: a reader turned off (ingest.*.mode: off) or waiting for a provider key.
        kind = _SKIP_KINDS.get(row["error_code"], "other" if row["error_code"] else "mode_or_provider")
        counts[kind] += row["n"]
    return dict(sorted(counts.items()))


def summary() -> JsonObject | None:
    """The last whole walk's coverage with the skipped counts as they stand;
    None before any whole walk was recorded."""
    found = get_json_setting(COVERAGE_KEY)
    if found is None:
        return None
    found["skipped"] = skipped_by_kind()
    return found


def describe(found: JsonObject) -> str:
    """One line: what the last whole walk found, against git, and what it left out."""
    git = found["git_tracked_files"]
    line = f"Coverage: {found['walked_files']} files found, {found['indexed_files']} indexed"
    line += f", git tracks {git}" if git is not None else ""
    shown = left_out(found)
    return line + (f"; left out: {shown}" if shown else "")


def left_out(found: JsonObject) -> str:
    """``gitignore=12 files+3 dirs size_cap=2 ...``: a coverage's exclusions and skips by kind."""
    parts = []
    for kind, n in found["excluded"].items():
        dirs = f"+{n['dirs']} dirs" if n["dirs"] else ""
        parts.append(f"{kind}={n['files']} files{dirs}")
    parts += [f"{kind}={n}" for kind, n in found.get("skipped", {}).items()]
    return " ".join(parts)
