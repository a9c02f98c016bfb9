"""A file whose name is not valid UTF-8 is recorded like any file in error
(issue #34): ``reindex`` and ``status`` in real subprocesses, then ``up``
with its REST mirror. It is stored and shown by its name with
each undecodable byte written ``\\xNN``, never read, and every listing that
prints names prints it.
"""

from __future__ import annotations

import io
import json
import os
import tarfile

import httpx
import pytest

from tests.support import TLS
from tests.test_cli import cli

pytestmark = pytest.mark.slow

LATIN1 = b"caf\xe9.txt"  # a latin-1 name: not UTF-8
SHOWN = "caf\\xe9.txt"


def tar_with(name: bytes, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(os.fsdecode(name))
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_reindex_records_it_and_status_lists_it(corpus_dir):
    (corpus_dir / os.fsdecode(LATIN1)).write_bytes(b"bonjour\n")
    (corpus_dir / "fine.txt").write_text("fine\n")
    (corpus_dir / "bundle.tar").write_bytes(tar_with(b"na\xefve.md", b"# naive\n"))
    env = {"DIR2MCP_INGEST__ARCHIVES__MODE": "deep"}

    indexed = cli("reindex", "--dir", str(corpus_dir), env=env)
    report = json.loads(cli("status", "--dir", str(corpus_dir), "--json", env=env).stdout)
    human = cli("status", "--dir", str(corpus_dir), env=env)

    assert indexed.returncode == 0, indexed.stderr
    assert "Traceback" not in indexed.stderr + human.stderr
    assert report["by_status"]["error"] == 2
    errors = {e["rel_path"]: e["code"] for e in report["recent_errors"]}
    assert errors == {SHOWN: "EXTRACT_FAILED", "bundle.tar!/na\\xefve.md": "EXTRACT_FAILED"}
    assert human.returncode == 0, human.stderr
    assert f"  {SHOWN}: EXTRACT_FAILED: file name is not valid UTF-8" in human.stdout


def test_up_lists_and_counts_it(corpus_dir, running):
    (corpus_dir / os.fsdecode(LATIN1)).write_bytes(b"bonjour\n")
    (corpus_dir / "fine.txt").write_text("fine\n")
    up = running("--dir", str(corpus_dir), "--json")
    base = up.url().removesuffix("/mcp")
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = (corpus_dir / ".dir2mcp" / "secret.token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}

    page = httpx.get(f"{base}/api/v1/files", headers=headers, timeout=30, verify=TLS).json()
    assert {f["rel_path"]: f["status"] for f in page["files"]} == {"fine.txt": "ok", SHOWN: "error"}
    stats = httpx.get(f"{base}/api/v1/stats", headers=headers, timeout=30, verify=TLS).json()
    assert stats["indexing"]["errors"] == 1
    assert [e["data"]["rel_path"] for e in up.events() if e["event"] == "file_error"] == [SHOWN]
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def test_live_sync_records_and_forgets_it_and_goes_on_watching(corpus_dir, running):
    """watchfiles gives up at the first event naming such a file; the watch
    is set up again and the tree walked, so the file is recorded, and a
    file written after it is still picked up."""
    (corpus_dir / "fine.txt").write_text("fine\n")
    up = running("--dir", str(corpus_dir), "--json")
    base = up.url().removesuffix("/mcp")
    up.event("watch_ready")
    token = (corpus_dir / ".dir2mcp" / "secret.token").read_text().strip()
    headers = {"Authorization": f"Bearer {token}"}

    def listed() -> dict[str, str]:
        page = httpx.get(f"{base}/api/v1/files", headers=headers, timeout=30, verify=TLS).json()
        return {f["rel_path"]: f["status"] for f in page["files"]}

    later = os.fsdecode(b"r\xe9sum\xe9.md")
    (corpus_dir / later).write_bytes(b"# cv\n")
    up.wait_until(lambda u: listed().get("r\\xe9sum\\xe9.md") == "error", "live sync to record the new name")
    (corpus_dir / "after.txt").write_text("written after\n")
    up.wait_until(lambda u: listed().get("after.txt") == "ok", "live sync to go on")
    (corpus_dir / later).unlink()
    up.wait_until(lambda u: "r\\xe9sum\\xe9.md" not in listed(), "live sync to forget the deleted name")
    assert listed() == {"fine.txt": "ok", "after.txt": "ok"}
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
