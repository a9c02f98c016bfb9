"""Several server processes behind one address: what they must share.

Two daphne processes serve the same state directory. One MCP session is
used on both alternately (sessions live in the database), and with
``REDIS_URL`` set they share the rate limit through the real Redis on this
machine: together they allow the per-minute rate once, not twice.
"""

from __future__ import annotations

import socket
import time

import httpx
import psycopg
import pytest
import redis

from corpus.ingest.lock import PG_INDEX_LOCK
from tests.mcp_http import Server, base_env, serve_daphne, start_daphne, stop, write_corpus
from tests.support import TLS
from tests.up_process import ASKING_EVERY

pytestmark = pytest.mark.slow

REDIS_URL = "redis://127.0.0.1:6379/15"
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


def second_process(first: Server, env: dict[str, str]) -> Server:
    """Another daphne on the first one's root and state, on its own port."""
    return serve_daphne(first.root, base_env(DIR2MCP_ROOT=str(first.root), DIR2MCP_AUTH="auto", **env))


@pytest.fixture
def pair(tmp_path):
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:  # .ci/run starts Redis; by hand it may be down
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    write_corpus(tmp_path)
    env = {"REDIS_URL": REDIS_URL, "DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "12"}
    first = start_daphne(tmp_path, env=env)
    second = second_process(first, env)
    yield first, second
    for server in (first, second):
        err = stop(server)
        assert "Traceback" not in err, err[-2000:]


def test_one_session_served_by_two_processes_alternately(pair):
    first, second = pair
    session = first.initialize()
    answers = [(first if i % 2 else second).post(PING, session=session) for i in range(6)]
    assert [a.status_code for a in answers] == [200] * 6
    assert all(a.json()["result"] == {} for a in answers)
    hits = second.call(session, "dir2mcp.search", {"query": "loader"})["structuredContent"]["hits"]
    assert hits

    ended = httpx_delete(first, session)
    assert ended == 204
    assert second.post(PING, session=session).status_code == 404  # ended everywhere


def test_two_processes_share_one_rate_limit(pair):
    first, second = pair
    while time.time() % 60 > 45:  # the limit counts per wall-clock minute: start well inside one
        time.sleep(1)
    session = first.initialize()  # 1 request, then notifications/initialized: 2
    statuses = [(first if i % 2 else second).post(PING, session=session).status_code for i in range(14)]
    allowed = statuses.count(200)
    # 12 a minute in all: what initialize left, then 429 from either process.
    assert allowed == 10, statuses
    assert statuses[10:] == [429] * 4
    refused = second.post(PING, session=session)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1


def httpx_delete(server: Server, session: str) -> int:
    headers = server.headers(**{"MCP-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
    return httpx.delete(server.url, headers=headers, timeout=30, verify=TLS).status_code


def test_two_indexers_on_one_database_take_turns_whatever_their_state_directories(
    tmp_path, running, pg_database
):
    """Machines share PostgreSQL, not a state directory: the index lock is
    also the database's. Before, each `up` took the file lock of its own
    state directory and both indexed the same documents at once."""
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    env = {"DATABASE_URL": pg_database, "DIR2MCP_ROOT": str(root)}
    first = running(
        "--dir", str(root), "--state-dir", str(tmp_path / "state-a"), "--json", "--auth", "none", env=env
    )
    first.event("watch_ready")
    second = running(
        "--dir", str(root), "--state-dir", str(tmp_path / "state-b"), "--json", "--auth", "none", env=env
    )
    locked = second.event("warning", lambda d: d.get("code") == "INDEX_LOCKED")
    assert f"dir2mcp indexer {socket.gethostname()}" in locked["message"], locked
    found = second.rest("/api/v1/search", {"query": "loader configuration", "k": 5})
    assert found.status_code == 200 and found.json()["hits"], found.text  # it serves meanwhile
    assert not [e for e in second.events() if e["event"] in ("scan_progress", "watch_ready")]

    assert first.stop() == 0, first.stderr
    second.event("watch_ready", timeout=120)  # the lock is free: it takes over
    assert second.stop() == 0, second.stderr
    assert "Traceback" not in first.stderr + second.stderr


def test_an_indexer_that_lost_the_database_lock_stops_writing_until_it_has_it_again(
    tmp_path, running, pg_database
):
    """PostgreSQL dropped the lock's session (a restart, a cut connection)
    and another indexer took the lock: the first writes nothing more until
    the lock is free again. Before, it went on indexing beside the other."""
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    env = {"DATABASE_URL": pg_database, "DIR2MCP_ROOT": str(root)}
    up = running("--dir", str(root), "--json", "--auth", "none", env=env)
    up.event("watch_ready")
    with psycopg.connect(pg_database, autocommit=True) as other:
        dropped = other.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'dir2mcp indexer %'"
        ).fetchall()
        assert dropped == [(True,)]
        other.execute("SELECT pg_advisory_lock(%s)", [PG_INDEX_LOCK])  # another indexer, now the holder
        (root / "late.md").write_text(
            "# Late\n\nzebrafinch songs, written while another indexer holds the lock\n"
        )
        lost = up.event("warning", lambda d: d.get("code") == "INDEX_LOCKED")
        assert "another indexer" in lost["message"], lost
        assert not search_hits(up, "zebrafinch")
    # The other indexer let go: this one takes the lock again and catches up.
    found = up.wait_until(
        lambda u: search_hits(u, "zebrafinch"),
        "late.md indexed after the lock came back",
        interval=ASKING_EVERY,
    )
    assert found == ["late.md"]
    assert up.stop() == 0, up.stderr
    assert "Traceback" not in up.stderr


def search_hits(up, query: str) -> list[str]:
    answer = up.rest("/api/v1/search", {"query": query, "k": 5})
    assert answer.status_code == 200, answer.text
    return [hit["rel_path"] for hit in answer.json()["hits"]]
