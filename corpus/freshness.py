"""How fresh an answer is (issue #37 item 4), in any process on the database.

An answer is as fresh as the index behind it. Three facts say how far the
index may lag the directory, each at a cost that does not grow with the tree:

- the changes live sync has seen and not yet written: a count the watcher
  records in the database (:mod:`corpus.ingest.pending`), one row read;
- whether an indexing pass or a live-sync batch is running, and when the
  index was last written: the latest job's row, read by its index;
- which files the answer cites changed on disk since they were indexed:
  their size and modification time against what the index recorded, one
  ``stat`` each, for at most :data:`MAX_CHECKED` of them.

The last is what a serving-only process (``up --no-index``, a second server
behind a load balancer) can tell by itself, with no watcher of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from corpus.ingest.pending import pending_count
from corpus.models import Document, IndexJob
from corpus.status import job_alive, latest_job
from kernel.jsontypes import JsonObject

#: Cited files checked at most per answer: a list_files page of its default size.
MAX_CHECKED = 200


@dataclass(frozen=True)
class Freshness:
    pending_changes: int
    indexing: bool
    #: cited files that changed or vanished on disk since they were indexed, in citing order
    stale: tuple[str, ...] = ()
    #: cited files past :data:`MAX_CHECKED`, not checked
    unchecked: int = 0
    #: when the index was last written (unix seconds); None before the first pass
    as_of: float | None = None

    @property
    def fresh(self) -> bool:
        return not (self.pending_changes or self.stale)

    def as_dict(self) -> JsonObject:
        out = {"pending_changes": self.pending_changes, "indexing": self.indexing, "stale": list(self.stale)}
        if self.unchecked:
            out["unchecked"] = self.unchecked
        if self.as_of is not None:
            out["as_of"] = _utc(self.as_of)
        return out


def freshness(root: Path, cited: Iterable[str]) -> Freshness:
    """How fresh an answer citing ``cited`` (rel_paths, repeats allowed) is."""
    paths = list(dict.fromkeys(rel for rel in cited if rel))
    checked = paths[:MAX_CHECKED]
    job = latest_job()
    return Freshness(
        pending_changes=pending_count(),
        indexing=job_alive(job),
        stale=tuple(changed_since_indexed(root, checked)),
        unchecked=len(paths) - len(checked),
        as_of=_written_at(job),
    )


def changed_since_indexed(root: Path, rel_paths: list[str]) -> list[str]:
    """Those of ``rel_paths`` whose file's size or modification time differs
    from what the index recorded, or that are gone or not indexed. An
    archive member (``a.zip!/x.txt``) is as fresh as its archive."""
    files = {rel: rel.split("!/", 1)[0] for rel in rel_paths}
    recorded = dict(
        (rel, (size, mtime_ns))
        for rel, size, mtime_ns in Document.objects.filter(
            rel_path__in=set(files.values()), deleted=False
        ).values_list("rel_path", "size_bytes", "mtime_ns")
    )
    changed = {file for file in set(files.values()) if _differs(root, file, recorded.get(file))}
    return [rel for rel, file in files.items() if file in changed]


def _differs(root: Path, rel_path: str, recorded: tuple[int, int] | None) -> bool:
    if recorded is None:
        return True
    try:
        # Followed as the walk follows a link it indexes: the target's size and time.
        st = os.stat(os.path.join(root, rel_path))
    except OSError:
        return True
    return (st.st_size, st.st_mtime_ns) != recorded


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _written_at(job: IndexJob | None) -> float | None:
    if job is None:
        return None
    return job.finished_unix or job.updated_unix or None
