"""An archive over an archive-wide limit is indexed not at all (issue #34).

Real ``reindex`` and ``status`` subprocesses, then ``up``: an archive with
more members than ``ingest.archives.max_members`` (or more bytes than
``max_total_mb``) has no member in the index or in search, is recorded
once (``skipped``, ``ARCHIVE_REJECTED``), is not read again by the next
incremental pass while it is unchanged, and is read again once it changes.
It used to keep its first 10,000 members searchable, and be read again on
every pass.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.support import TLS, read_only
from tests.test_cli import cli

pytestmark = pytest.mark.slow

DEEP = {"DIR2MCP_INGEST__ARCHIVES__MODE": "deep", "DIR2MCP_INGEST__ARCHIVES__MAX_MEMBERS": "50"}
WORD = "quokkaword"


def members(count: int) -> dict[str, bytes]:
    return {f"m/f{i:05}.txt": f"{WORD} member {i}\n".encode() for i in range(count)}


def tar(files: dict[str, bytes], mode: str = "w") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


KINDS = [
    pytest.param("bundle.tar", lambda files: tar(files), id="tar"),
    pytest.param("bundle.tar.gz", lambda files: tar(files, "w:gz"), id="tar.gz"),
    pytest.param("bundle.tar.xz", lambda files: tar(files, "w:xz"), id="tar.xz"),
    pytest.param("bundle.zip", zipped, id="zip"),
    pytest.param("outer.zip", lambda files: zipped({"inner.tar": tar(files)}), id="nested"),
]


def documents(root: Path) -> dict[str, tuple[str, str]]:
    with read_only(root / ".dir2mcp" / "meta.sqlite") as db:
        rows = db.execute("SELECT rel_path, status, error_code FROM documents WHERE deleted = 0")
        return {path: (status, code) for path, status, code in rows}


def last_progress(run) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return [e["data"] for e in events if e["event"] == "scan_progress"][-1]


def reindex(root: Path, *extra: str) -> dict:
    return last_progress(cli("reindex", "--dir", str(root), "--json", *extra, env=DEEP))


@pytest.mark.parametrize(("name", "build"), KINDS)
def test_an_archive_over_its_member_limit_is_indexed_not_at_all_and_read_once(corpus_dir, name, build):
    (corpus_dir / "notes.txt").write_text("plain notes\n")
    (corpus_dir / name).write_bytes(build(members(60)))

    first = reindex(corpus_dir)
    docs = documents(corpus_dir)
    assert docs == {"notes.txt": ("ok", ""), name: ("skipped", "ARCHIVE_REJECTED")}
    assert (first["indexed"], first["skipped"], first["errors"]) == (1, 1, 0)

    again = reindex(corpus_dir, "--incremental")  # what up does at start
    assert (again["unchanged"], again["indexed"], again["skipped"], again["errors"]) == (2, 0, 0, 0)
    assert documents(corpus_dir) == docs

    (corpus_dir / name).write_bytes(build(members(40)))  # changed, and now within the limit
    changed = reindex(corpus_dir, "--incremental")
    docs = documents(corpus_dir)
    assert docs[name] == ("ok", "")
    assert sum(path.startswith(name + "!/") and "/m/f" in path for path in docs) == 40
    assert changed["errors"] == 0


def test_an_archive_over_its_total_bytes_is_indexed_not_at_all(corpus_dir):
    big = {f"m/f{i:02}.txt": (f"{WORD} {i} " * 4000).encode() for i in range(40)}  # 40 x 60 KB
    (corpus_dir / "bundle.zip").write_bytes(zipped(big))
    env = {**DEEP, "DIR2MCP_INGEST__ARCHIVES__MAX_TOTAL_MB": "1"}
    run = last_progress(cli("reindex", "--dir", str(corpus_dir), "--json", env=env))
    assert documents(corpus_dir) == {"bundle.zip": ("skipped", "ARCHIVE_REJECTED")}
    assert (run["indexed"], run["skipped"]) == (0, 1)


def test_status_shows_the_rejected_archive_as_skipped(corpus_dir):
    (corpus_dir / "bundle.zip").write_bytes(zipped(members(60)))
    reindex(corpus_dir)
    report = json.loads(cli("status", "--dir", str(corpus_dir), "--json", env=DEEP).stdout)
    assert report["by_status"] == {"skipped": 1}
    assert report["documents"] == 1


def test_a_tar_of_20000_members_under_the_default_limit_has_no_member_searchable(corpus_dir, running):
    (corpus_dir / "notes.txt").write_text(f"{WORD} in a plain file\n")
    (corpus_dir / "huge.tar").write_bytes(
        tar({f"f{i:05}.txt": f"{WORD} {i}\n".encode() for i in range(20000)})
    )
    up = running("--dir", str(corpus_dir), "--json", env={"DIR2MCP_INGEST__ARCHIVES__MODE": "deep"})
    base = up.url().removesuffix("/mcp")
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = (corpus_dir / ".dir2mcp" / "secret.token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}

    hits = httpx.get(
        f"{base}/api/v1/search", params={"query": WORD, "k": 50}, headers=headers, timeout=60, verify=TLS
    )
    assert hits.status_code == 200, hits.text
    assert [hit["rel_path"] for hit in hits.json()["hits"]] == ["notes.txt"]
    files = httpx.get(f"{base}/api/v1/files", headers=headers, timeout=60, verify=TLS).json()["files"]
    assert {f["rel_path"]: f["status"] for f in files} == {"notes.txt": "ok", "huge.tar": "skipped"}
    assert documents(corpus_dir)["huge.tar"] == ("skipped", "ARCHIVE_REJECTED")
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
