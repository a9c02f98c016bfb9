"""The state directory is its owner's alone: 0700 directories and 0600
files, whatever the umask, SQLite's -wal and -shm files included; a state
directory found looser is tightened on start, with a warning."""

from __future__ import annotations

import io
import json
import logging
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from corpus.events import Reporter
from corpus.store import open_store, owner_only_database
from kernel import state_identity
from kernel.state import IndexLock, StateDir, atomic_write, ensure_token, write_json
from tests.test_cli import make_tree


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(top: Path) -> dict[str, int]:
    """The mode of ``top`` and of everything in it (links not followed)."""
    found = {".": mode(top)}
    for path in sorted(top.rglob("*")):
        if not path.is_symlink():
            found[str(path.relative_to(top))] = mode(path)
    return found


def not_owner_only(top: Path) -> dict[str, str]:
    """Entries that are not 0700 (directories) or 0600 (files)."""
    bad = {}
    for rel, bits in modes(top).items():
        want = 0o700 if (top / rel).is_dir() else 0o600
        if bits != want:
            bad[rel] = oct(bits)
    return bad


@pytest.fixture
def loose_umask():
    """A umask that lets group and others read, as many systems default to;
    the one in force before is put back afterwards."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_a_new_state_directory_and_what_is_written_in_it_are_owner_only(tmp_path, loose_umask):
    state = StateDir(tmp_path / "state")

    assert state.ensure() == []
    atomic_write(state.snapshot, "snapshot\n")
    write_json(state.corpus_json, {"documents": 1})
    ensure_token(state)
    with IndexLock(state):
        pass
    # What a library writes there later (a cache entry, a log) through the umask.
    (state.cache / "ocr" / "entry.json").write_text("{}")
    with open(state.path / "payments" / "settlement.log", "a") as log:
        log.write("line\n")

    assert len(modes(state.path)) >= 11
    assert not_owner_only(state.path) == {}


def test_sqlite_wal_and_shm_files_take_the_database_files_mode(tmp_path, loose_umask):
    state = StateDir(tmp_path / "state")
    state.ensure()
    os.umask(0o022)  # as if the umask were left as it was: the mode must come from the file itself
    owner_only_database(state)
    db = sqlite3.connect(state.meta_db)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()
    # and the same database without the first step, beside it, for comparison
    plain = sqlite3.connect(tmp_path / "plain.sqlite")
    plain.execute("PRAGMA journal_mode=WAL")
    plain.execute("CREATE TABLE t (x)")
    plain.commit()
    try:
        ours = {p.name: oct(mode(p)) for p in state.path.glob("meta.sqlite*")}
        theirs = {p.name: oct(mode(p)) for p in tmp_path.glob("plain.sqlite*")}
    finally:
        db.close()
        plain.close()

    assert ours == {"meta.sqlite": "0o600", "meta.sqlite-wal": "0o600", "meta.sqlite-shm": "0o600"}
    assert theirs == {"plain.sqlite": "0o644", "plain.sqlite-wal": "0o644", "plain.sqlite-shm": "0o644"}


def loose_state(path: Path, outside: Path) -> None:
    """A state directory dir2mcp made, loosened as a copy with cp -r or a
    umask of 022 leaves it (one dir2mcp did not make is refused:
    tests/test_state_trust.py)."""
    path.mkdir(parents=True)
    state_identity.claim(path)
    (path / "cache" / "ocr").mkdir(parents=True)
    (path / "logs").mkdir()
    for rel in ("meta.sqlite", "meta.sqlite-wal", "corpus.json", "cache/ocr/page.json", "logs/run.log"):
        (path / rel).write_text("x")
        (path / rel).chmod(0o644)
    (path / "secret.token").write_text("t")
    (path / "secret.token").chmod(0o400)  # stricter than 0600: left as it is
    (path / "logs").chmod(0o775)
    path.chmod(0o755)
    outside.write_text("not ours")
    outside.chmod(0o644)
    (path / "link").symlink_to(outside)


def test_a_loose_state_directory_is_tightened_with_a_warning(tmp_path, caplog):
    state = StateDir(tmp_path / "state")
    outside = tmp_path / "outside.txt"
    loose_state(state.path, outside)

    with caplog.at_level(logging.WARNING, logger="kernel.state"):
        tightened = state.ensure()
        again = state.ensure()

    assert sorted(tightened) == sorted(
        [".", "corpus.json", "meta.sqlite", "meta.sqlite-wal", "cache/ocr/page.json", "logs", "logs/run.log"]
    )
    assert again == []
    warnings = [
        r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "kernel.state"
    ]
    assert len(warnings) == 1 and str(state.path) in warnings[0] and "tightened 7 entries" in warnings[0]
    assert mode(state.path / "secret.token") == 0o400
    assert mode(outside) == 0o644  # the link's target is not ours to change
    assert {rel: bits for rel, bits in not_owner_only(state.path).items() if rel != "secret.token"} == {}


@pytest.mark.django_db
def test_opening_the_store_reports_the_tightening_as_an_event(tmp_path):
    state = StateDir(tmp_path / "state")
    loose_state(state.path, tmp_path / "outside.txt")
    out = io.StringIO()

    open_store(state, reporter=Reporter(out, json_mode=True))

    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(e["event"], e["level"], e["data"]["code"]) for e in events] == [
        ("warning", "warn", "STATE_PERMISSIONS_TIGHTENED")
    ]
    assert "cache/ocr/page.json" in events[0]["data"]["paths"]
    assert mode(state.path) == 0o700


def test_the_home_directory_is_never_swept(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("x")
    (home / ".bashrc").chmod(0o644)
    monkeypatch.setenv("HOME", str(home))

    assert StateDir(home).tighten() == []
    assert mode(home / ".bashrc") == 0o644


@pytest.mark.slow
def test_up_tightens_a_loose_state_directory_and_keeps_everything_owner_only(
    corpus_dir, running, loose_umask
):
    make_tree(corpus_dir, files=2)
    state = corpus_dir / ".dir2mcp"
    state.mkdir()
    state_identity.claim(state)  # dir2mcp made it; a umask of 022 loosened what came after
    (state / "cache" / "ocr").mkdir(parents=True)
    (state / "cache" / "ocr" / "old.json").write_text("{}")
    (state / "corpus.json").write_text(json.dumps({"root": str(corpus_dir)}))
    state.chmod(0o755)
    (state / "cache").chmod(0o755)

    up = running("--dir", str(corpus_dir), "--json")  # started with the umask 022
    up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    while_serving = not_owner_only(state)
    names = {p.name for p in state.iterdir()}
    code = up.stop()

    assert code == 0, up.stderr
    assert {"meta.sqlite", "meta.sqlite-wal", "meta.sqlite-shm", "secret.token", "connection.json"} <= names
    assert while_serving == {}
    assert not_owner_only(state) == {}
    assert "WARNING kernel.state" in up.stderr and "tightened" in up.stderr
    assert "cache/ocr/old.json" in up.stderr
