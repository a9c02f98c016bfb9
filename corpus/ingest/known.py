"""Change detection: what the store holds, what this pass has seen, and
whether a file must be read again (spec §7.6).

A file whose size, mtime and policy are unchanged is skipped without being
read; one whose ``content_hash`` is unchanged only has its mtime refreshed.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import QuerySet

from corpus.ingest.prepare import Prepared, Preparer
from corpus.ingest.unpack import policy_hash
from corpus.models import Document
from kernel import errors


@dataclass(frozen=True)
class Known:
    """What the store already holds for a document (loaded once per run)."""

    doc_id: int
    doc_type: str
    size: int
    mtime_ns: int
    content_hash: str
    policy_hash: str
    status: str
    deleted: bool
    error_code: str = ""


def at_or_under(path: str, rel_path: str) -> bool:
    """``path`` is ``rel_path``, inside it (a directory) or a member of it (an archive)."""
    return path == rel_path or path.startswith((rel_path + "/", rel_path + "!/"))


class KnownFiles:
    """The store's documents by rel_path as one pass knows them (loaded
    once, then kept as the pass writes), and the paths the pass has seen:
    what it has not seen at the end of a walk is gone."""

    def __init__(self, preparer: Preparer, *, mode: str = "incremental") -> None:
        self.preparer = preparer
        #: "full" reads every file again
        self.mode = mode
        self.seen: set[str] = set()
        self._rows: dict[str, Known] = {}
        self._sorted_paths: list[str] = []
        #: doc_ids of archives holding a member in error: read again, like a file in error
        self._failed_containers: set[int] = set()

    def load(self, documents: QuerySet[Document] | None = None) -> None:
        """What the store holds for ``documents`` (default: all of them)."""
        rows = (Document.objects.all() if documents is None else documents).values_list(
            "rel_path",
            "doc_id",
            "doc_type",
            "size_bytes",
            "mtime_ns",
            "content_hash",
            "policy_hash",
            "status",
            "deleted",
            "error_code",
        )
        self._rows = {row[0]: Known(*row[1:]) for row in rows.iterator(chunk_size=5000)}
        self._sorted_paths = sorted(self._rows)
        self._failed_containers = set()
        for rel_path, known in self._rows.items():
            if known.status != "error" or known.deleted or "!/" not in rel_path:
                continue
            parts = rel_path.split("!/")
            for depth in range(1, len(parts)):
                container = self._rows.get("!/".join(parts[:depth]))
                if container is not None:
                    self._failed_containers.add(container.doc_id)

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, rel_path: str) -> bool:
        return rel_path in self._rows

    def get(self, rel_path: str) -> Known | None:
        return self._rows.get(rel_path)

    def record(self, rel_path: str, known: Known) -> Known | None:
        """What the store now holds for ``rel_path``; what it held before."""
        before = self._rows.get(rel_path)
        self._rows[rel_path] = known
        return before

    def under(self, prefix: str) -> Iterator[str]:
        """Live known paths starting with ``prefix``: a range of the sorted
        list, so a large tree is not scanned once per archive or change."""
        paths = self._sorted_paths
        for i in range(bisect.bisect_left(paths, prefix), len(paths)):
            path = paths[i]
            if not path.startswith(prefix):
                return
            if not self._rows[path].deleted:
                yield path

    def unseen(self) -> list[str]:
        """Live known paths this pass has not seen."""
        return [p for p, k in self._rows.items() if not k.deleted and p not in self.seen]

    def unseen_at(self, rel_path: str) -> list[str]:
        """Live known paths at or beneath ``rel_path`` (a file, a directory,
        an archive's members) that this pass has not seen."""
        candidates = [rel_path, *self.under(rel_path + "/"), *self.under(rel_path + "!/")]
        return [p for p in candidates if p in self._rows and not self._rows[p].deleted and p not in self.seen]

    def forget_seen(self, rel_path: str) -> None:
        """Unsee ``rel_path`` and what is beneath it, to read it again: a file
        deleted since the walk saw it must not stay live."""
        self.seen = {p for p in self.seen if not at_or_under(p, rel_path)}

    def policy_hash(self, doc_type: str) -> str:
        return policy_hash(self.preparer, doc_type)

    def stat_unchanged(self, known: Known, size: int, mtime_ns: int) -> bool:
        """Skip without reading: the same size, mtime and policy."""
        return (
            self.mode != "full"
            and not known.deleted
            and known.status != "error"
            and known.doc_id not in self._failed_containers
            and known.size == size
            and known.mtime_ns == mtime_ns
            and self._policy_current(known, self.policy_hash(known.doc_type))
        )

    def content_unchanged(self, known: Known, base: Prepared) -> bool:
        """Keep as stored: the same type, policy and content hash."""
        return (
            self.mode != "full"
            and not known.deleted
            and known.status != "error"
            and known.doc_id not in self._failed_containers
            and known.doc_type == base.doc_type
            and self._policy_current(known, base.policy_hash)
            and known.content_hash == base.content_hash
        )

    def _policy_current(self, known: Known, policy_hash: str) -> bool:
        """Whether ``known`` was made under today's policy: ``policy_hash``,
        or for a document that holds a credential the same policy with
        today's ``security.secret_mode`` (:meth:`Preparer.policy_hash`). One
        kept out for a credential under the plain policy (before the mode
        was part of it) is read again, once."""
        if known.policy_hash == policy_hash:
            return known.error_code != errors.SECRET_DETECTED
        return known.policy_hash == self.preparer.policy_hash(known.doc_type, secret=True)
