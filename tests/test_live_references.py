"""References follow a rename and a deletion under live sync (issue #32).

A real ``up`` (daphne, the watcher on) serves the corpus; the using file is
moved, then deleted, on disk while it runs, and ``dir2mcp.references``
over MCP HTTP is polled until the watcher's indexer has caught up (no fixed
sleep), then checked in full.
"""

from __future__ import annotations

import shutil

import pytest

from tests.mcp_http import Server
from tests.support import wait_until

DEFINES = "def foo_target(value):\n    return value * 2\n"
USES = "from lib import foo_target\n\n\ndef main():\n    return foo_target(21)\n"


def references(server: Server, session: str, name: str) -> list[tuple[str, int]]:
    result = server.call(session, "dir2mcp.references", {"name": name})
    assert result.get("isError") is not True, result
    found = result["structuredContent"]["references"]
    return sorted((hit["rel_path"], hit["span"]["start_line"]) for hit in found)


def settled(found: list[tuple[str, int]], new: str, old: str) -> list[tuple[str, int]] | None:
    """``found`` once it names ``new`` and no longer ``old``."""
    paths = {rel for rel, _ in found}
    return found if new in paths and old not in paths else None


@pytest.mark.slow
def test_references_follow_a_rename_and_a_deletion_under_live_sync(corpus_dir, running):
    (corpus_dir / "lib.py").write_text(DEFINES)
    (corpus_dir / "app").mkdir()
    (corpus_dir / "app" / "main.py").write_text(USES)
    up = running("--dir", str(corpus_dir), "--json", "--auth", "none")
    up.event("watch_ready", timeout=120)  # indexed, and the OS watch is in place
    server = Server(corpus_dir, up.url(), None, up.proc)
    session = server.initialize()

    before = references(server, session, "foo_target")

    shutil.move(corpus_dir / "app" / "main.py", corpus_dir / "app" / "entry.py")
    # The watcher may see the new name before the old one goes: wait for
    # both, then check everything references returns.
    moved = wait_until(
        lambda: settled(references(server, session, "foo_target"), "app/entry.py", "app/main.py"),
        timeout=60,
        message="references to follow the rename",
    )
    (corpus_dir / "app" / "entry.py").unlink()
    wait_until(
        lambda: not references(server, session, "foo_target"),
        timeout=60,
        message="references to drop the deleted file",
    )
    gone = references(server, session, "foo_target")
    outline = server.call(session, "dir2mcp.symbols", {"name": "foo_target"})["structuredContent"]
    assert up.stop() == 0, up.stderr

    assert before == [("app/main.py", 1), ("app/main.py", 5)]
    assert moved == [("app/entry.py", 1), ("app/entry.py", 5)]
    assert gone == []
    # the definition stays, in the file nobody touched
    assert [hit["rel_path"] for hit in outline["symbols"]] == ["lib.py"]
    assert "Traceback" not in up.stderr
