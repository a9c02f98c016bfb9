"""Reading what a compressed file holds, for the indexing pass: a plain
gzip file's text, and an archive's members once the archive is known to be
within its archive-wide limits (spec §7.3, §17).

:func:`corpus.ingest.archives.iter_members` reads an archive's bytes; this
module decides what the pass does with the result. It queues nothing: each
method returns what the file reader (corpus/ingest/reading.py) is to write.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from corpus.ingest.archives import ArchiveLimits, ArchiveMember, MemberProblem, iter_members
from corpus.ingest.classify import classify, gzip_inner_name
from corpus.ingest.extract import gunzip_bounded
from corpus.ingest.prepare import HEAD_BYTES, Prepared, Preparer, sha256_hex
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import Config

#: Bump when how this module reads archives changes, so every archive is
#: read again on the next pass. 2: a plain ``.gz`` is the text it holds, and
#: an archive that cannot be read (or holds a member that cannot) is an error.
#: 3: an archive over an archive-wide limit has no member indexed.
ARCHIVE_READER_VERSION = "3"
#: The most member bytes of one archive held while it is checked against its limits.
HELD_MEMBER_BYTES = 64 * 2**20
#: A plain gzip file's doc_type until it is decompressed (never stored).
GZIP = "gzip"

Item = ArchiveMember | MemberProblem


def policy_hash(preparer: Preparer, doc_type: str) -> str:
    """The preparer's policy, and for archives how this module reads them."""
    policy = preparer.policy_hash(doc_type)
    return sha256_hex(f"{policy}:{ARCHIVE_READER_VERSION}")[:32] if doc_type == "archive" else policy


def from_gzip(prepared: Prepared) -> Prepared:
    """Mark the text of a plain gzip file as converted, so ``open_file`` reads
    it from the store (corpus/files.py), not the compressed bytes on disk."""
    if prepared.extracted is not None:
        prepared.extracted.meta["converted_from"] = "gzip"
    return prepared


class ArchiveReader:
    """Gzip and archive reading for one pass: its limits, and the archives
    (nested ones included) being read now, which their members' problems mark."""

    def __init__(
        self, config: Config, preparer: Preparer, engine: ExclusionEngine, stop: threading.Event
    ) -> None:
        self.config = config
        self.preparer = preparer
        self.engine = engine
        self.stop = stop
        self.limits = ArchiveLimits.from_config(config)
        #: archives (and nested ones) being read now, by rel_path
        self._open: dict[str, Prepared] = {}

    def gunzip(self, base: Prepared, data: bytes) -> bytes | Prepared:
        """The text a plain gzip file holds, with ``base`` made the document of
        its type; or, when it cannot be read within the limits, ``base`` as
        the document to write (an error, or skipped when simply too large)."""
        archives = self.config.ingest.archives
        try:
            inner = gunzip_bounded(
                data, max_bytes=int(self.config.ingest.max_file_mb * 2**20), max_ratio=archives.max_ratio
            )
        except errors.Dir2mcpError as exc:
            # Recorded as the compressed file it is, so an unchanged one stays as it is.
            base.doc_type, base.policy_hash = "archive", policy_hash(self.preparer, "archive")
            if exc.code == errors.FILE_TOO_LARGE:
                return self.preparer.skipped(base, exc.code, exc.message)
            return base.fail("error", exc.code, exc.message)
        name = gzip_inner_name(base.rel_path, data[:HEAD_BYTES]) or base.rel_path
        base.doc_type = classify(name, inner[:HEAD_BYTES])
        base.policy_hash = policy_hash(self.preparer, base.doc_type)
        if base.doc_type == "archive":
            return self.preparer.skipped(
                base, errors.DOC_TYPE_UNSUPPORTED,
                "a compressed archive not named .tar.gz or .tgz; rename it to index its members",
            )  # fmt: skip
        if len(inner) > self.config.max_bytes_for(base.doc_type):
            return self.preparer.skipped(
                base, errors.FILE_TOO_LARGE,
                f"{len(inner)} bytes once decompressed exceeds the {base.doc_type} limit of "
                f"{self.config.max_bytes_for(base.doc_type)} bytes",
            )  # fmt: skip
        return inner

    def members(self, base: Prepared, data: bytes) -> Iterable[Item] | Prepared | None:
        """The archive's members and problems, once it is known to be within
        its archive-wide limits (members, total bytes, a compressed tar's
        ratio; nested archives count). One over them has no member indexed:
        ``base`` comes back ``skipped`` with the limit's code, like a file
        over its size limit, so it is recorded once and read again only when
        its size, mtime (then its hash) or the limits change. None when the
        run stops meanwhile. Members are held while they total at most
        HELD_MEMBER_BYTES, so a small archive is read once; a larger one is
        read again, as the same bytes read the same way."""

        def read() -> Iterator[Item]:
            return iter_members(data, rel_path=base.rel_path, limits=self.limits, engine=self.engine)

        held: list[Item] | None = []
        size = 0
        for item in read():
            if self.stop.is_set():
                return None
            if isinstance(item, MemberProblem) and item.stops_archive:
                member = item.rel_path[len(base.rel_path) + 2 :]
                where = f"member {member!r}: " if member else ""
                return self.preparer.skipped(
                    base, item.code, f"{where}{item.message}; none of its members is indexed"
                )
            if held is not None:
                size += item.size if isinstance(item, ArchiveMember) else 0
                if size > HELD_MEMBER_BYTES:
                    held = None  # read again below rather than held
                else:
                    held.append(item)
        return held if held is not None else read()

    @contextmanager
    def reading(self, base: Prepared) -> Iterator[None]:
        """While ``base``'s members are read, their problems mark it."""
        self._open = {base.rel_path: base}
        try:
            yield
        finally:
            self._open = {}

    def opened(self, nested: Prepared) -> None:
        """A nested archive whose members come next (from the same read)."""
        self._open[nested.rel_path] = nested

    def blame(self, problem: MemberProblem) -> bool:
        """An archive (or a nested one) that cannot be read, or that holds a
        member that cannot, is an error, with the first problem's code: it
        is counted and reported when written (``BatchWriter``), shown by
        ``status``, ``list_files`` and the admin, and read again on every
        pass until it succeeds. False for a further problem, or one no open
        archive holds: the caller counts and reports it as it comes."""
        container = problem.rel_path
        while container not in self._open and "!/" in container:
            container = container.rsplit("!/", 1)[0]
        target = self._open.get(container)
        if target is None or target.status == "error":
            return False
        member = problem.rel_path[len(container) + 2 :]
        where = f"member {member!r}: " if member else ""
        target.fail("error", problem.code, f"{where}{problem.message}")
        return True
