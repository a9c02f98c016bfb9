"""Hostile round of 2026-11-29, session 21: every field and header as hostile,
against a real ``up`` (daphne, the gate, the connection bounds); see
docs/security.md, "Hostile round, 2026-11-29 (session 21)". Each test shows
a way in that was open before its fix.
"""

from __future__ import annotations

import threading

import pytest

from tests.mcp_http import Server, base_env
from tests.test_hostile_patterns import CATASTROPHIC, Call, build, busy_worker
from tests.up_process import Up

pytestmark = pytest.mark.slow


def started(root, **env: str) -> tuple[Up, Server]:
    up = Up("--dir", str(root), "--json", env=base_env(**env))
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    return up, Server(root, url, token, up.proc)


def stopped(up: Up) -> None:
    code = up.stop()
    up.close()
    assert code == 0, up.stderr[-3000:]
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


# -- the regex worker's turns ------------------------------------------------------


def test_one_client_never_takes_every_turn_at_the_regex_worker(tmp_path):
    """One client kept two catastrophic regex finds going at all times (each
    holding the worker for its whole budget, the next already waiting): the
    other client's regex find waited behind them and answered ``timed_out``.
    Now the turn goes to the client that waits, within a quarter of its budget."""
    root = tmp_path / "corpus"
    build(root)
    up, srv = started(root, DIR2MCP_FIND_BUDGET_SECONDS="6")
    try:
        hostile, other = srv.initialize(), srv.initialize()
        done = threading.Event()
        answers: list[dict] = []

        def hog() -> None:
            while not done.is_set():
                answers.append(srv.call(hostile, "dir2mcp.find", {"content": CATASTROPHIC, "regex": True}))

        hogs = [Call(hog) for _ in range(2)]
        busy_worker(srv, hogs[0])
        served = []
        for _ in range(3):
            found = srv.call(other, "dir2mcp.find", {"content": "hnsw", "regex": True})
            served.append(found["structuredContent"])
        done.set()
        for call in hogs:
            call.value()
    finally:
        stopped(up)

    for result in served:
        assert result.get("timed_out") is not True, served
        assert [m["rel_path"] for m in result["matches"]] == ["notes.txt"], served
    # the hostile client's calls gave way (or ran out their budget): never an error
    assert answers and all(a["structuredContent"].get("timed_out") for a in answers), answers
