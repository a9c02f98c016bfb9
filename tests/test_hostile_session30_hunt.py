"""Hostile round of 2026-11-30, session 30, "Hunt": prompt arguments,
resource URIs, header tricks, exotic ids, log levels, cancels and REST query
strings against a live ``up`` and ``mcp_stdio``; see docs/security.md,
"Hostile round, 2026-11-30 (session 30)", "Hunt". Each test shows a probe
that answered otherwise before its fix.
"""

from __future__ import annotations

from pathlib import Path

import watchfiles

from corpus.ingest.watch import WatchFilter


def test_the_watch_drops_the_state_directory_seen_through_a_symlink(tmp_path: Path) -> None:
    """A symlink in the root to the state directory (``st -> .dir2mcp``),
    there when ``up`` starts: the OS watch follows it, and the index's own
    writes arrived as ``st/index.sqlite3-wal`` and the like, which the
    filter let through (it compared the event's path with the state
    directory's real path). Each pass's writes started the next pass: a
    live ``up`` ran 62 passes of nothing in ten idle seconds, the indexer
    child a fifth of a core, for as long as it served. Now the events of a
    directory whose real path is in the state directory are dropped."""
    root = tmp_path / "corpus"
    state = root / ".dir2mcp"
    (state / "sub").mkdir(parents=True)
    (root / "src").mkdir()
    (root / "st").symlink_to(state)
    (root / "src" / "deep").symlink_to(state / "sub")
    keep = WatchFilter(state)
    through_link = [root / "st" / "index.sqlite3-wal", root / "src" / "deep" / "x.db"]
    # before: True for both (the lexical comparison saw no state directory in them)
    assert [keep(watchfiles.Change.modified, str(p)) for p in through_link] == [False, False]
    assert not keep(watchfiles.Change.modified, str(state / "index.sqlite3"))  # as before
    # the controls: files of the root, and the link itself (a name in the root)
    assert keep(watchfiles.Change.added, str(root / "src" / "a.py"))
    assert keep(watchfiles.Change.added, str(root / "st"))
