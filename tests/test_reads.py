"""The read utilities (issue #32, seed 002): checksum, diff, several slices
in one call, on a real index and through the tool table."""

from __future__ import annotations

import hashlib

import pytest

from corpus.navigation import reads
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import build_config
from mcp_gateway import context, tools
from tests.samples import make_pdf

pytestmark = pytest.mark.django_db

GUIDE = "# Guide\n\nThe loader reads configuration files.\n\nIt never writes.\n"


@pytest.fixture
def engine(corpus_dir, state):
    return ExclusionEngine.from_config(corpus_dir, build_config({}, {}, {}), state_dir=state.path)


def refused(code: str, call, *args, **kwargs) -> errors.Dir2mcpError:
    with pytest.raises(errors.Dir2mcpError) as info:
        call(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


@pytest.mark.parametrize("algorithm", reads.ALGORITHMS)
def test_checksum_is_the_digest_of_the_files_bytes(index, engine, corpus_dir, algorithm):
    data = b"\x00binary\xffbytes" * 100_000  # over one read block
    index({"blob.bin": data})
    result = reads.checksum(engine, "blob.bin", algorithm=algorithm)
    assert result == {
        "rel_path": "blob.bin",
        "algorithm": algorithm,
        "digest": hashlib.new(algorithm, data).hexdigest(),
        "size_bytes": len(data),
    }


def test_checksum_refuses_what_open_file_refuses(index, engine):
    index({".env": "X=1\n", "keys.txt": "id AKIAABCDEFGHIJKLMNOP\n", "a.zip": b"PK\x05\x06" + b"\x00" * 18})
    refused(errors.INVALID_FIELD, reads.checksum, engine, "x.txt", algorithm="crc32")
    refused(errors.FILE_NOT_FOUND, reads.checksum, engine, "missing.txt")
    refused(errors.PATH_OUTSIDE_ROOT, reads.checksum, engine, "../x.txt")
    refused(errors.FORBIDDEN, reads.checksum, engine, ".env")
    refused(errors.FORBIDDEN, reads.checksum, engine, "keys.txt")  # indexed as secret-bearing
    refused(errors.MISSING_FIELD, reads.checksum, engine, "")


def test_diff_of_two_text_files_is_a_unified_diff(index, engine):
    index({"a.md": GUIDE, "b.md": GUIDE.replace("never writes", "writes a cache")})
    result = reads.diff(engine, "a.md", "b.md")
    assert (result["identical"], result["added"], result["removed"], result["truncated"]) == (
        False,
        1,
        1,
        False,
    )
    assert result["diff"].splitlines()[:2] == ["--- a.md", "+++ b.md"]
    assert "-It never writes." in result["diff"] and "+It writes a cache." in result["diff"]
    assert reads.diff(engine, "a.md", "a.md")["identical"] is True


def test_diff_of_two_pdfs_compares_their_text_page_by_page(index, engine):
    index(
        {
            "v1.pdf": make_pdf(["Terms of service", "Fees are ten dollars"]),
            "v2.pdf": make_pdf(["Terms of service", "Fees are twelve dollars"]),
        }
    )
    result = reads.diff(engine, "v1.pdf", "v2.pdf", context=0)
    assert "--- page 2 ---" not in result["diff"].splitlines()[3:]  # unchanged lines are not shown
    assert "-Fees are ten dollars" in result["diff"] and "+Fees are twelve dollars" in result["diff"]


def test_a_long_diff_is_cut_at_max_chars_and_says_so(index, engine):
    index({"a.txt": "".join(f"line {i}\n" for i in range(3000)), "b.txt": "other\n" * 3000})
    result = reads.diff(engine, "a.txt", "b.txt", max_chars=1000)
    assert result["truncated"] is True and len(result["diff"]) <= 1000
    assert (result["added"], result["removed"]) == (3000, 3000)  # counted in full


def test_diff_refuses_a_secret_on_either_side(index, engine, corpus_dir):
    index({"a.md": GUIDE})
    (corpus_dir / "b.md").write_text(GUIDE + "token ghp_" + "a1B2" * 10 + "\n")  # not indexed yet
    refused(errors.FORBIDDEN, reads.diff, engine, "a.md", "b.md")


def test_open_files_returns_each_slice_or_its_error_in_order(index, corpus_dir, state):
    index({"src/a.py": "def a():\n    return 1\n", "notes.txt": "one\ntwo\nthree\n"})
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    result = tools.run(
        tools.table()["dir2mcp.open_files"],
        {
            "slices": [
                {"rel_path": "notes.txt", "start_line": 2, "end_line": 3},
                {"rel_path": "../outside.txt"},
                {"rel_path": "src/a.py"},
            ]
        },
        tools.Call(ctx),
    )
    first, second, third = result["structuredContent"]["slices"]
    assert first["result"]["content"] == "two\nthree"
    assert second["error"]["code"] == errors.PATH_OUTSIDE_ROOT
    assert third["result"]["span"] == {"kind": "lines", "start_line": 1, "end_line": 2}
    assert "two" in result["content"][0]["text"] and "PATH_OUTSIDE_ROOT" in result["content"][0]["text"]
