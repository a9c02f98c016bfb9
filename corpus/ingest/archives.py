"""Archive members as documents (spec §7.3, §17): zip and tar, read into memory only.

Members are never written to disk, so zip-slip cannot land a file anywhere;
bad names are still reported so an index never holds a path like
``a.zip!/../x``. Header sizes are not trusted: every member is read in
blocks against the limits, which is what stops zip bombs.
"""

from __future__ import annotations

import calendar
import io
import os
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

from corpus.security import ExclusionEngine, normalize_rel_path
from kernel import errors
from kernel.config import Config

_BLOCK = 64 * 1024
# Small members compress extremely well when they are repetitive; the ratio
# only signals a bomb once a member has produced a meaningful amount of data.
_RATIO_GRACE_BYTES = 1 * 2**20
_TAR_SUFFIXES = {
    ".tar": None,
    ".tar.gz": b"\x1f\x8b",
    ".tgz": b"\x1f\x8b",
    ".tar.bz2": b"BZh",
    ".tbz2": b"BZh",
    ".tar.xz": b"\xfd7zXZ\x00",
    ".txz": b"\xfd7zXZ\x00",
}
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
_READ_ERRORS = (
    zipfile.BadZipFile,
    tarfile.TarError,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    NotImplementedError,
)


@dataclass(frozen=True)
class ArchiveLimits:
    max_depth: int = 2
    max_members: int = 10000
    max_total_bytes: int = 512 * 2**20
    max_ratio: float = 100.0
    max_member_bytes: int = 20 * 2**20

    @classmethod
    def from_config(cls, config: Config) -> ArchiveLimits:
        archives = config.ingest.archives
        return cls(
            max_depth=archives.max_depth,
            max_members=archives.max_members,
            max_total_bytes=int(archives.max_total_mb * 2**20),
            max_ratio=archives.max_ratio,
            max_member_bytes=int(config.ingest.max_file_mb * 2**20),
        )


@dataclass(frozen=True)
class ArchiveMember:
    rel_path: str
    name: str
    size: int
    mtime_ns: int
    data: bytes


@dataclass(frozen=True)
class MemberProblem:
    rel_path: str
    code: str
    message: str
    #: an archive-wide limit (members, total bytes, a compressed tar's ratio)
    #: was passed: the read stopped here, and the whole archive is over its limits
    stops_archive: bool = False


class _Budget:
    """Counters shared by an archive and everything nested in it."""

    def __init__(self, limits: ArchiveLimits, engine: ExclusionEngine | None) -> None:
        self.limits = limits
        self.engine = engine
        self.members = 0
        self.total_bytes = 0
        self.stopped = False

    def excludes(self, member_rel: str) -> bool:
        return self.engine is not None and self.engine.excluded_reason(member_rel) is not None


class _Rejected(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def named_like_archive(name: str) -> bool:
    """Whether a file of this name may be read as an archive, so that
    documents ``name!/...`` may hold its members (the extension is
    :func:`archive_format`'s first condition)."""
    return name.lower().endswith((".zip", *_TAR_SUFFIXES))


def archive_format(name: str, head: bytes) -> str | None:
    """``"zip"``, ``"tar"`` or ``None``, from the name's extension and the first 512+ bytes.

    Both must agree, so a ``.docx`` (a zip) or a text file named ``x.zip``
    is not treated as an archive.
    """
    lower = name.lower()
    if lower.endswith(".zip"):
        return "zip" if head.startswith(_ZIP_MAGIC) else None
    for suffix, magic in _TAR_SUFFIXES.items():
        if lower.endswith(suffix):
            ok = head.startswith(magic) if magic else _is_tar_header(head)
            return "tar" if ok else None
    return None


def _is_tar_header(head: bytes) -> bool:
    if len(head) < 512:
        return False
    if head[257:262] == b"ustar":
        return True
    try:
        return int(head[148:156].split(b"\x00")[0].strip() or b"-1", 8) in tarfile.calc_chksums(head[:512])  # type: ignore[attr-defined]  # tarfile's own checksum, not in typeshed
    except ValueError:
        return False


def iter_members(
    path_or_bytes: Path | bytes,
    *,
    rel_path: str,
    limits: ArchiveLimits,
    depth: int = 1,
    engine: ExclusionEngine | None = None,
) -> Iterator[ArchiveMember | MemberProblem]:
    """Yield the files inside an archive (and inside archives within it, up to ``max_depth``).

    Problems come back as :class:`MemberProblem`; this never raises for a bad archive.
    The problem of a limit that stops the whole read is the last item, marked
    ``stops_archive``.
    """
    budget = _Budget(limits, engine)
    for item in _iter_archive(path_or_bytes, rel_path, depth, budget):
        if isinstance(item, MemberProblem) and budget.stopped:
            item = replace(item, stops_archive=True)
        yield item


def _iter_archive(
    source: Path | bytes, rel_path: str, depth: int, budget: _Budget
) -> Iterator[ArchiveMember | MemberProblem]:
    try:
        with _open(source) as fh:
            fmt = archive_format(rel_path.rsplit("!/", 1)[-1], fh.read(512))
            fh.seek(0)
            if fmt is None:
                raise _Rejected(errors.ARCHIVE_REJECTED, "not a supported zip or tar archive")
            reader = _zip_members if fmt == "zip" else _tar_members
            for item in reader(fh, rel_path, budget):
                yield item
                if isinstance(item, ArchiveMember):
                    yield from _nested(item, depth, budget)
                if budget.stopped:
                    return
    except _Rejected as exc:
        yield MemberProblem(rel_path, exc.code, exc.message)
    except _READ_ERRORS as exc:
        yield MemberProblem(rel_path, errors.ARCHIVE_REJECTED, f"corrupt or truncated archive: {exc}")


def _open(source: Path | bytes) -> IO[bytes]:
    if isinstance(source, bytes):
        return io.BytesIO(source)
    # Never blocks on a FIFO; the type that counts is the opened descriptor's.
    # (The indexer passes bytes it read through ExclusionEngine.open.)
    handle = open(os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")
    if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
        handle.close()
        raise _Rejected(errors.ARCHIVE_REJECTED, "not a regular file")
    return handle


def _nested(member: ArchiveMember, depth: int, budget: _Budget) -> Iterator[ArchiveMember | MemberProblem]:
    if depth >= budget.limits.max_depth or archive_format(member.name, member.data[:512]) is None:
        return
    yield from _iter_archive(member.data, member.rel_path, depth + 1, budget)


def _count_member(budget: _Budget) -> None:
    budget.members += 1
    if budget.members > budget.limits.max_members:
        budget.stopped = True
        raise _Rejected(errors.ARCHIVE_REJECTED, f"more than {budget.limits.max_members} members (limit)")


def _check_name(name: str) -> str:
    """The member's canonical name; raises ``_Rejected`` for zip-slip style names."""
    try:
        return normalize_rel_path(name)
    except errors.Dir2mcpError as exc:
        raise _Rejected(errors.PATH_OUTSIDE_ROOT, f"unsafe member name rejected: {exc.message}") from None


def _read_capped(fh: IO[bytes], budget: _Budget, ratio: tuple[int, int] | None) -> bytes:
    """Read ``fh`` in blocks against the limits.

    ``ratio`` is (the budget's byte count when the compressed unit began,
    that unit's compressed size): a zip member, or a whole compressed tar.
    """
    limits = budget.limits
    chunks: list[bytes] = []
    size = 0
    while block := fh.read(_BLOCK):
        size += len(block)
        _charge(budget, len(block))
        if size > limits.max_member_bytes:
            raise _Rejected(errors.FILE_TOO_LARGE, f"member exceeds {limits.max_member_bytes} bytes")
        if ratio and _ratio_exceeded(budget.total_bytes - ratio[0], ratio[1], limits.max_ratio):
            raise _Rejected(errors.ARCHIVE_REJECTED, f"compression ratio exceeds {limits.max_ratio:g}")
        chunks.append(block)
    return b"".join(chunks)


def _ratio_exceeded(produced: int, compressed: int, max_ratio: float) -> bool:
    return produced > _RATIO_GRACE_BYTES and produced / max(compressed, 1) > max_ratio


def _charge(budget: _Budget, size: int) -> None:
    budget.total_bytes += max(size, 0)
    if budget.total_bytes > budget.limits.max_total_bytes:
        budget.stopped = True
        raise _Rejected(
            errors.ARCHIVE_REJECTED, f"archive exceeds {budget.limits.max_total_bytes} bytes (limit)"
        )


def _printable(name: str) -> str:
    return name.replace("\x00", "\\x00")


def _zip_members(fh: IO[bytes], rel_path: str, budget: _Budget) -> Iterator[ArchiveMember | MemberProblem]:
    with zipfile.ZipFile(fh) as zf:
        for info in zf.infolist():
            _count_member(budget)
            if info.is_dir():
                continue
            try:
                member = _zip_member(zf, info, rel_path, budget)
            except _Rejected as exc:
                yield MemberProblem(f"{rel_path}!/{_printable(info.orig_filename)}", exc.code, exc.message)
            except _READ_ERRORS as exc:
                yield MemberProblem(
                    f"{rel_path}!/{_printable(info.orig_filename)}",
                    errors.ARCHIVE_REJECTED,
                    f"bad member: {exc}",
                )
            else:
                if member is not None:
                    yield member
            if budget.stopped:
                return


def _zip_member(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, rel_path: str, budget: _Budget
) -> ArchiveMember | None:
    # orig_filename keeps what zipfile would silently cut at a NUL byte.
    name = _check_name(info.orig_filename)
    if budget.excludes(f"{rel_path}!/{name}"):
        return None
    if stat.S_ISLNK(info.external_attr >> 16):
        raise _Rejected(errors.ARCHIVE_REJECTED, "symlink member skipped")
    if info.flag_bits & 0x1:
        raise _Rejected(errors.ARCHIVE_REJECTED, "encrypted member skipped")
    with zf.open(info) as fh:
        data = _read_capped(fh, budget, (budget.total_bytes, info.compress_size))
    mtime = calendar.timegm((*info.date_time, 0, 0, 0))
    return ArchiveMember(f"{rel_path}!/{name}", name, len(data), mtime * 10**9, data)


def _tar_members(fh: IO[bytes], rel_path: str, budget: _Budget) -> Iterator[ArchiveMember | MemberProblem]:
    ratio = _tar_ratio_base(fh, budget)
    with tarfile.open(fileobj=fh, mode="r|*") as tf:
        for info in tf:
            _count_member(budget)
            if info.isdir():
                continue
            try:
                member = _tar_member(tf, info, rel_path, budget, ratio)
            except _Rejected as exc:
                yield MemberProblem(f"{rel_path}!/{_printable(info.name)}", exc.code, exc.message)
            else:
                if member is not None:
                    yield member
            if budget.stopped:
                return


def _tar_ratio_base(fh: IO[bytes], budget: _Budget) -> tuple[int, int] | None:
    """The ratio baseline for a compressed tar, whose ratio is judged as a whole; ``None`` if plain."""
    head = fh.read(512)
    size = fh.seek(0, io.SEEK_END)
    fh.seek(0)
    return None if _is_tar_header(head) else (budget.total_bytes, size)


def _tar_member(
    tf: tarfile.TarFile, info: tarfile.TarInfo, rel_path: str, budget: _Budget, ratio: tuple[int, int] | None
) -> ArchiveMember | None:
    name = _check_name(info.name)
    # tarfile reads through a skipped member's declared data to reach the
    # next header, so that work is charged to the budget too.
    if budget.excludes(f"{rel_path}!/{name}"):
        _charge(budget, info.size)
        return None
    if not info.isreg():
        _charge(budget, info.size)
        kind = "link" if info.issym() or info.islnk() else "special file"
        raise _Rejected(errors.ARCHIVE_REJECTED, f"{kind} member skipped")
    try:
        member = tf.extractfile(info)
        assert member is not None  # a regular member (isreg above) has a file
        data = _read_capped(member, budget, ratio)
    except _Rejected as exc:
        if exc.code == errors.FILE_TOO_LARGE:
            _charge(budget, info.size - budget.limits.max_member_bytes)
        else:
            budget.stopped = True  # a compressed tar's ratio is for the whole stream
        raise
    return ArchiveMember(f"{rel_path}!/{name}", name, len(data), int(info.mtime) * 10**9, data)
