"""Hostile round of 2026-11-30, session 26: a hostile client against a real
``up`` (daphne, the gate, the connection bounds); see docs/security.md,
"Hostile round, 2026-11-30 (session 26)". Each test shows a way in that was
open before its fix.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import httpx
import pytest

from mcp_gateway.ratelimit import RedisRateLimiter
from tests.fakes.redis import FakeRedis
from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli
from tests.test_hostile_clients import WAIT, Opened, send, stateless, token_of

pytestmark = pytest.mark.slow


def rpc(srv: Server, method: str, params: dict) -> httpx.Response:
    """A stateless (2026-07-28) request with the server's token."""
    body, headers = stateless(method, params)
    return httpx.post(
        srv.url, headers={**headers, "Authorization": f"Bearer {srv.token}"}, json=body, timeout=WAIT
    )


# -- a completion of what the rules exclude now ----------------------------------------------


def complete(srv: Server, name: str, value: str) -> list[str]:
    """The values ``completion/complete`` gives for the explain prompt's argument ``name``."""
    asked = rpc(
        srv,
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": name, "value": value}},
    )
    assert asked.status_code == 200, asked.text
    completion = asked.json()["result"]["completion"]
    assert completion["total"] == len(completion["values"]), completion
    return completion["values"]


def test_completion_offers_nothing_of_a_file_the_rules_exclude_now(tmp_path, running):
    """A symbol completion without a ``path`` offered every name the index
    knows to be defined, from a table of names alone: a file excluded since
    it was indexed (a new ``.gitignore`` line here) kept its names in the
    answer until the walk that change starts had ended, and for good under
    ``up --no-index`` (left open by session 25). A path completion judged
    its values, but kept each verdict for the table's life, which only a
    change of the index ends: under ``--no-index``, for good too. A name is
    now offered while a file defining it passes the rules as they are now,
    and a verdict is kept two seconds."""
    root = tmp_path / "corpus"
    write_corpus(root)  # src/loader.py defines parse_config_file
    (root / "src" / "kept.py").write_text("def parse_kept_value(text):\n    return text\n")
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index")
    srv = Server(root, up.url(), token_of(root), up.proc)
    assert complete(srv, "symbol", "parse_") == ["parse_config_file", "parse_kept_value"]
    assert complete(srv, "path", "src/") == ["src/kept.py", "src/loader.py"]
    (root / ".gitignore").write_text("src/loader.py\n")
    wait_until(
        lambda: complete(srv, "path", "src/") == ["src/kept.py"],
        timeout=15,
        message="the path completion to judge src/loader.py again",  # before: never
    )
    # before: parse_config_file still offered
    assert complete(srv, "symbol", "parse_") == ["parse_kept_value"]


# -- a subscription while Redis is away ------------------------------------------------------


@pytest.fixture
def unreachable_redis():
    """A Redis whose connections never complete, as behind a firewall that
    drops them: a listener that never accepts, its one-connection backlog
    taken, so the kernel drops every further SYN. The fan-out group is then
    never joined, nor known to fail, for as long as a test runs. Yields its URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    filler = [socket.socket() for _ in range(2)]
    for conn in filler:
        conn.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            conn.connect(listener.getsockname())
    yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    for conn in filler:
        conn.close()
    listener.close()


#: more than the loop's default pool has threads (six on two CPUs), fewer than a client's 16 streams
LISTENS = 12


def test_subscriptions_never_hold_a_shared_thread_while_redis_is_away(tmp_path, running, unreachable_redis):
    """With Redis configured and away, each ``subscriptions/listen`` waited
    up to 5 s for the fan-out group on a thread of the loop's default pool
    (``asyncio.to_thread(HUB.ready)``), and each ``resources/subscribe`` on
    one of the write lane's two threads (left open by session 25): a dozen
    listens held every shared thread, and every other client's
    ``tools/list``, session lookup and ``initialize`` waited behind them.
    The wait now holds no thread (the loop awaits it), and once a wait has
    run out or a join failed the next subscription is answered at once."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")  # notes.txt is indexed before the server serves
    assert indexed.returncode == 0, indexed.stderr
    # Without an indexer nothing joins the group before the first subscription
    # does: every subscription below meets the join under way (its connection
    # times out after 5 s), never a failure already known.
    up = running("--dir", str(root), "--json", "--no-index", env={"REDIS_URL": unreachable_redis})
    srv = Server(root, up.url(), token_of(root), up.proc)
    url = up.url()
    credential = {"Authorization": f"Bearer {srv.token}"}
    sessions = [srv.initialize() for _ in range(2)]
    order: list[str] = []
    lock = threading.Lock()

    def record(what: str) -> None:
        with lock:
            order.append(what)

    def listen() -> None:
        body, headers = stateless(
            "subscriptions/listen", {"notifications": {"resourceSubscriptions": ["dir2mcp:///notes.txt"]}}
        )
        opened = Opened(send(url, "/mcp", body, {**headers, **credential}))
        assert opened.streaming, (opened.status, opened.body)
        opened.response.readline()  # the acknowledgment's first line
        record("listen")
        opened.conn.close()

    def subscribe(session: str) -> None:
        answered = srv.post(
            {
                "jsonrpc": "2.0",
                "id": 3,
                "method": "resources/subscribe",
                "params": {"uri": "dir2mcp:///notes.txt"},
            },
            session=session,
        )
        assert answered.status_code == 200 and "result" in answered.json(), answered.text
        record("subscribe")

    waiting = [threading.Thread(target=listen, daemon=True) for _ in range(LISTENS)]
    waiting += [threading.Thread(target=subscribe, args=(s,), daemon=True) for s in sessions]
    for thread in waiting:
        thread.start()
    with httpx.Client(timeout=2 * WAIT) as client:
        client.get(srv.base + "/healthz/live")  # the subscriptions are in before the others' calls
        listed = rpc(srv, "tools/list", {})
        assert listed.status_code == 200 and listed.json()["result"]["tools"], listed.text
        record("tools/list")
        session = srv.initialize()
        record("initialize")
    for thread in waiting:
        thread.join(2 * WAIT)
    # Before: answered only once waits had run out and freed a thread.
    assert order[:2] == ["tools/list", "initialize"], order
    assert sorted(order[2:]) == ["listen"] * LISTENS + ["subscribe"] * 2, order
    assert session


# -- the rate limit while Redis is away -----------------------------------------------------


class SilentRedis(FakeRedis):
    """A Redis that takes connections and never answers (hung, or behind a
    route that drops its replies), counting the connections it takes (each
    client's handshake waits for an answer that never comes: no command
    follows it)."""

    def serve(self, conn: socket.socket) -> None:
        while self.received(conn) is not None:
            pass


@pytest.fixture
def silent_redis():
    redis = SilentRedis()
    yield redis
    redis.close()


def test_the_rate_limit_leaves_a_redis_that_does_not_answer_alone(tmp_path, running, silent_redis):
    """With ``server.rate_limit_per_minute`` and Redis configured, the gate
    counts each request in Redis, on the event loop. A Redis that took
    connections and never answered held the loop for the client's 1 s
    timeout on every request, and each was asked again: every client,
    ``/healthz/live`` included, waited (p50 33 s under four clients'
    loops of requests). Once Redis has failed, each process counts on its
    own for ten seconds before it asks again."""
    root = tmp_path / "corpus"
    write_corpus(root)
    env = {"REDIS_URL": silent_redis.url, "DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "6000"}
    up = running("--dir", str(root), "--json", env=env)
    srv = Server(root, up.url(), token_of(root), up.proc)
    body, headers = stateless("tools/list", {})
    credential = {"Authorization": f"Bearer {srv.token}"}
    before = silent_redis.connections()  # the notifications' listener connects too, every 5 s or more
    with httpx.Client(timeout=2 * WAIT) as client:
        for _ in range(10):
            listed = client.post(srv.url, headers={**headers, **credential}, json=body)
            assert listed.status_code == 200, listed.text
    asked = silent_redis.connections() - before
    assert asked <= 3, asked  # before: one a request, each holding the loop 1 s


def test_a_shared_limiter_asks_a_silent_redis_once_and_still_limits(silent_redis):
    """The limiter itself: a Redis that never answers costs one wait, then
    the process counts on its own (before: every call waited its 1 s and
    was let through unlimited)."""
    limiter = RedisRateLimiter(silent_redis.url, per_minute=60)  # a burst of 6 in this process
    answers = [limiter.retry_after("client") for _ in range(8)]
    assert answers[:6] == [0] * 6 and all(answers[6:]), answers  # before: [0] * 8
    assert silent_redis.connections() == 1  # before: one a call
