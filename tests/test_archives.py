"""Archive members as documents (spec §7.3, §17): limits, zip-slip, nesting, corrupt input."""

from __future__ import annotations

import io
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from corpus.ingest.archives import (
    ArchiveLimits,
    ArchiveMember,
    MemberProblem,
    archive_format,
    iter_members,
    named_like_archive,
)
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import DEFAULT_PATH_EXCLUDES, build_config

ZEROS_50MB = 50 * 2**20


def make_zip(members: dict[str, bytes], *, stored: bool = False) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo("placeholder", date_time=(2024, 5, 6, 7, 8, 10))
            info.filename = name  # set after construction so zipfile keeps unsafe names as given
            info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buffer.getvalue()


def make_tar(members: dict[str, bytes], *, mode: str = "w", extra: list[tarfile.TarInfo] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tf.addfile(info, io.BytesIO(data))
        for info in extra:
            tf.addfile(info)
    return buffer.getvalue()


def run(data: bytes | Path, rel_path: str = "bundle.zip", **kwargs) -> list[ArchiveMember | MemberProblem]:
    limits = kwargs.pop("limits", ArchiveLimits())
    return list(iter_members(data, rel_path=rel_path, limits=limits, **kwargs))


def members(items: list) -> list[str]:
    return [item.rel_path for item in items if isinstance(item, ArchiveMember)]


def problems(items: list) -> list[tuple[str, str]]:
    return [(item.rel_path, item.code) for item in items if isinstance(item, MemberProblem)]


ZIP_HEAD = make_zip({"a.txt": b"a"})
TAR_HEAD = make_tar({"a.txt": b"a"})
FORMATS = [
    pytest.param("bundle.zip", ZIP_HEAD, "zip", id="zip"),
    pytest.param("BUNDLE.ZIP", ZIP_HEAD, "zip", id="zip-uppercase-extension"),
    pytest.param("report.docx", ZIP_HEAD, None, id="docx-is-zip-but-not-an-archive-document"),
    pytest.param("fake.zip", b"just some text" * 50, None, id="zip-extension-without-magic"),
    pytest.param("backup.tar", TAR_HEAD, "tar", id="tar"),
    pytest.param("backup.tar", TAR_HEAD[:100], None, id="tar-head-too-short"),
    pytest.param("backup.tar.gz", make_tar({"a": b"a"}, mode="w:gz"), "tar", id="tar-gz"),
    pytest.param("backup.tgz", make_tar({"a": b"a"}, mode="w:gz"), "tar", id="tgz"),
    pytest.param("backup.tar.bz2", make_tar({"a": b"a"}, mode="w:bz2"), "tar", id="tar-bz2"),
    pytest.param("backup.tar.xz", make_tar({"a": b"a"}, mode="w:xz"), "tar", id="tar-xz"),
    pytest.param("backup.tar.gz", ZIP_HEAD, None, id="tar-gz-extension-with-zip-bytes"),
    pytest.param("notes.gz", make_tar({"a": b"a"}, mode="w:gz"), None, id="plain-gz-not-an-archive"),
    pytest.param("x.txt", ZIP_HEAD, None, id="zip-bytes-with-text-name"),
]


@pytest.mark.parametrize(("name", "head", "expected"), FORMATS)
def test_archive_format_needs_extension_and_magic_to_agree(
    name: str, head: bytes, expected: str | None
) -> None:
    assert archive_format(name, head[:512]) == expected


@pytest.mark.parametrize(("name", "head", "expected"), FORMATS)
def test_only_names_like_archives_can_hold_members(name: str, head: bytes, expected: str | None) -> None:
    """Workers look for a path's members only when its name is an
    archive's: whatever archive_format reads as one must pass."""
    if expected is not None:
        assert named_like_archive(name)
    for head_of_anything in (head[:512], ZIP_HEAD[:512], TAR_HEAD[:512]):
        if archive_format(name, head_of_anything) is not None:
            assert named_like_archive(name)
    assert not named_like_archive("report.docx") and not named_like_archive("notes.gz")


def test_zip_members_are_named_under_the_archive_and_directories_skipped(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(zipfile.ZipInfo("docs/", date_time=(2024, 1, 1, 0, 0, 0)), b"")
        zf.writestr(zipfile.ZipInfo("docs/readme.md", date_time=(2024, 1, 2, 3, 4, 6)), b"# Hi\n")
        zf.writestr("./top.txt", b"top")
    path = tmp_path / "bundle.zip"
    path.write_bytes(buffer.getvalue())
    items = run(path, rel_path="sub/bundle.zip")
    first = items[0]
    assert [type(i) for i in items] == [ArchiveMember, ArchiveMember]
    assert (first.rel_path, first.name, first.size, first.data) == (
        "sub/bundle.zip!/docs/readme.md",
        "docs/readme.md",
        5,
        b"# Hi\n",
    )
    assert first.mtime_ns == 1704164646 * 10**9
    assert items[1].rel_path == "sub/bundle.zip!/top.txt"


@pytest.mark.parametrize("mode", ["w", "w:gz", "w:bz2", "w:xz"], ids=["tar", "gz", "bz2", "xz"])
def test_tar_members_are_read_from_every_compression(mode: str) -> None:
    data = make_tar({"a/one.txt": b"one", "two.md": b"two"}, mode=mode)
    items = run(data, rel_path="b.tar" if mode == "w" else f"b.tar.{mode[2:]}")
    assert [(i.name, i.data, i.mtime_ns) for i in items] == [
        ("a/one.txt", b"one", 1_700_000_000 * 10**9),
        ("two.md", b"two", 1_700_000_000 * 10**9),
    ]


ZIP_SLIP_NAMES = [
    pytest.param("../evil.txt", id="parent"),
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("docs/../../evil.txt", id="parent-inside"),
    pytest.param("..\\evil.txt", id="backslash-parent"),
    pytest.param("C:\\Windows\\evil.txt", id="drive-letter"),
    pytest.param("C:/evil.txt", id="drive-letter-slash"),
    pytest.param("ok.txt\x00../../evil.txt", id="nul-byte"),
]


@pytest.mark.parametrize("name", ZIP_SLIP_NAMES)
def test_zip_slip_member_is_rejected_and_never_written(tmp_path: Path, monkeypatch, name: str) -> None:
    monkeypatch.chdir(tmp_path)
    items = run(make_zip({name: b"pwned", "safe.txt": b"ok"}))
    assert problems(items) and all(code == errors.PATH_OUTSIDE_ROOT for _, code in problems(items))
    assert members(items) == ["bundle.zip!/safe.txt"]
    assert not any(p.name == "evil.txt" for p in tmp_path.parent.rglob("evil.txt"))


@pytest.mark.parametrize(
    "name", ["../evil.txt", "/etc/passwd", "a/../../evil.txt"], ids=["parent", "abs", "inner"]
)
def test_tar_slip_member_is_rejected(name: str) -> None:
    items = run(make_tar({name: b"pwned", "safe.txt": b"ok"}), rel_path="b.tar")
    assert problems(items) == [(f"b.tar!/{name}", errors.PATH_OUTSIDE_ROOT)]
    assert members(items) == ["b.tar!/safe.txt"]


def test_tar_link_and_device_members_are_skipped_with_a_problem() -> None:
    symlink = tarfile.TarInfo("passwd_link")
    symlink.type, symlink.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hardlink = tarfile.TarInfo("hard_link")
    hardlink.type, hardlink.linkname = tarfile.LNKTYPE, "safe.txt"
    fifo = tarfile.TarInfo("pipe")
    fifo.type = tarfile.FIFOTYPE
    items = run(make_tar({"safe.txt": b"ok"}, extra=[symlink, hardlink, fifo]), rel_path="b.tar")
    assert members(items) == ["b.tar!/safe.txt"]
    assert problems(items) == [
        ("b.tar!/passwd_link", errors.ARCHIVE_REJECTED),
        ("b.tar!/hard_link", errors.ARCHIVE_REJECTED),
        ("b.tar!/pipe", errors.ARCHIVE_REJECTED),
    ]


def test_zip_symlink_member_is_skipped_with_a_problem() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        link = zipfile.ZipInfo("link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, b"/etc/passwd")
        zf.writestr("safe.txt", b"ok")
    items = run(buffer.getvalue())
    assert problems(items) == [("bundle.zip!/link", errors.ARCHIVE_REJECTED)]
    assert members(items) == ["bundle.zip!/safe.txt"]


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    """50 MB of zeros compressed to about 50 KB, then an innocent member."""
    return make_zip({"bomb.bin": bytes(ZEROS_50MB), "after.txt": b"still here"})


def test_zip_bomb_is_stopped_by_the_ratio_limit(zip_bomb: bytes) -> None:
    assert len(zip_bomb) < ZEROS_50MB // 500
    limits = ArchiveLimits(max_member_bytes=200 * 2**20, max_total_bytes=400 * 2**20, max_ratio=100)
    items = run(zip_bomb, limits=limits)
    assert problems(items) == [("bundle.zip!/bomb.bin", errors.ARCHIVE_REJECTED)]
    assert "ratio" in items[0].message
    assert members(items) == ["bundle.zip!/after.txt"]


def test_zip_bomb_is_stopped_by_the_member_size_limit(zip_bomb: bytes) -> None:
    limits = ArchiveLimits(max_member_bytes=4 * 2**20, max_ratio=10**9)
    items = run(zip_bomb, limits=limits)
    assert problems(items) == [("bundle.zip!/bomb.bin", errors.FILE_TOO_LARGE)]
    assert members(items) == ["bundle.zip!/after.txt"]


def test_total_bytes_limit_rejects_and_stops_the_archive(zip_bomb: bytes) -> None:
    limits = ArchiveLimits(max_member_bytes=200 * 2**20, max_total_bytes=8 * 2**20, max_ratio=10**9)
    items = run(zip_bomb, limits=limits)
    assert problems(items) == [("bundle.zip!/bomb.bin", errors.ARCHIVE_REJECTED)]
    assert members(items) == []


def test_compressed_tar_bomb_is_rejected_by_its_overall_ratio() -> None:
    bomb = make_tar({"zeros.bin": bytes(ZEROS_50MB), "after.txt": b"x"}, mode="w:gz")
    limits = ArchiveLimits(max_member_bytes=200 * 2**20, max_ratio=100)
    items = run(bomb, rel_path="b.tar.gz", limits=limits)
    assert problems(items) == [("b.tar.gz!/zeros.bin", errors.ARCHIVE_REJECTED)]
    assert members(items) == []


def test_uncompressed_tar_is_not_judged_by_ratio() -> None:
    data = make_tar({"zeros.bin": bytes(3 * 2**20)})
    items = run(data, rel_path="b.tar", limits=ArchiveLimits(max_ratio=2))
    assert members(items) == ["b.tar!/zeros.bin"]


def test_too_many_members_yields_one_problem_and_stops() -> None:
    data = make_zip({f"f{i:02}.txt": b"x" for i in range(20)})
    items = run(data, limits=ArchiveLimits(max_members=5))
    assert len(members(items)) == 5
    assert problems(items) == [("bundle.zip", errors.ARCHIVE_REJECTED)]
    assert items[-1].stops_archive  # the last item: the pipeline indexes none of the five


@pytest.fixture(scope="module")
def nested() -> bytes:
    """outer.zip > inner.tar > deep.zip > x.txt, beside a plain top-level file."""
    deep = make_zip({"x.txt": b"deepest"})
    inner = make_tar({"deep.zip": deep, "y.md": b"middle"})
    return make_zip({"inner.tar": inner, "top.txt": b"top"})


def test_nested_archives_recurse_up_to_max_depth(nested: bytes) -> None:
    items = run(nested, rel_path="outer.zip", limits=ArchiveLimits(max_depth=2))
    assert problems(items) == []
    assert members(items) == [
        "outer.zip!/inner.tar",
        "outer.zip!/inner.tar!/deep.zip",
        "outer.zip!/inner.tar!/y.md",
        "outer.zip!/top.txt",
    ]


def test_deeper_limit_reaches_the_innermost_member(nested: bytes) -> None:
    items = run(nested, rel_path="outer.zip", limits=ArchiveLimits(max_depth=3))
    assert "outer.zip!/inner.tar!/deep.zip!/x.txt" in members(items)


def test_depth_one_does_not_recurse(nested: bytes) -> None:
    items = run(nested, rel_path="outer.zip", limits=ArchiveLimits(max_depth=1))
    assert members(items) == ["outer.zip!/inner.tar", "outer.zip!/top.txt"]


def test_total_limit_is_shared_with_nested_archives() -> None:
    inner = make_zip({f"{i}.bin": bytes(2**20) for i in range(4)}, stored=True)
    outer = make_zip({"inner.zip": inner, "z_last.txt": b"x"}, stored=True)
    items = run(outer, rel_path="outer.zip", limits=ArchiveLimits(max_total_bytes=6 * 2**20 + 2**19))
    assert problems(items) == [("outer.zip!/inner.zip!/2.bin", errors.ARCHIVE_REJECTED)]
    assert members(items) == [
        "outer.zip!/inner.zip",
        "outer.zip!/inner.zip!/0.bin",
        "outer.zip!/inner.zip!/1.bin",
    ]


CORRUPT = [
    pytest.param(make_zip({"a.txt": b"a" * 1000})[:60], "t.zip", id="truncated-zip"),
    pytest.param(b"PK\x03\x04" + b"garbage" * 100, "g.zip", id="garbage-zip"),
    pytest.param(make_tar({"a.txt": b"a" * 5000}, mode="w:gz")[:40], "t.tar.gz", id="truncated-tgz"),
    pytest.param(make_tar({"a.txt": b"a" * 5000})[:1200], "t.tar", id="truncated-tar"),
    pytest.param(b"not an archive at all" * 40, "n.tar", id="not-an-archive"),
]


@pytest.mark.parametrize(("data", "name"), CORRUPT)
def test_corrupt_or_truncated_archive_is_a_problem_not_an_exception(data: bytes, name: str) -> None:
    items = run(data, rel_path=name)
    assert members(items) == []
    assert [code for _, code in problems(items)] == [errors.ARCHIVE_REJECTED]


def test_corrupt_member_data_is_reported_and_others_still_read() -> None:
    data = bytearray(make_zip({"bad.txt": b"A" * 4000, "good.txt": b"fine"}, stored=True))
    offset = data.index(b"A" * 100)
    data[offset : offset + 10] = b"B" * 10  # breaks the CRC of bad.txt
    items = run(bytes(data))
    assert problems(items) == [("bundle.zip!/bad.txt", errors.ARCHIVE_REJECTED)]
    assert members(items) == ["bundle.zip!/good.txt"]


def test_engine_path_excludes_drop_members_silently(corpus_dir: Path) -> None:
    engine = ExclusionEngine(corpus_dir, ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), ()))
    data = make_zip({"conf/.env": b"SECRET=1", "keys/site.pem": b"-----", "README.md": b"hi"})
    items = run(data, engine=engine)
    assert [i.rel_path for i in items] == ["bundle.zip!/README.md"]


def test_limits_from_config_convert_megabytes() -> None:
    config = build_config(
        {"ingest": {"max_file_mb": 2, "archives": {"max_depth": 3, "max_members": 7, "max_total_mb": 1.5}}},
        {},
        {},
    )
    assert ArchiveLimits.from_config(config) == ArchiveLimits(
        max_depth=3, max_members=7, max_total_bytes=1536 * 1024, max_ratio=100, max_member_bytes=2 * 2**20
    )
