"""Live resource notifications (issue #18, item 2).

``up`` under daphne on a real port, spoken to with raw httpx (the standalone
GET stream's exact events) and with the official MCP client (which opens the
GET stream itself): the priming event, one stream per session (409), the
``updated`` notification of a subscribed file changed on disk, ``list_changed``
for a file added, ``Last-Event-ID`` replay of that stream and of no other,
DELETE, a deleted session and shutdown ending the stream, unsubscribe, and
the refusal of subscriptions to what may not be read. Then two processes on
one PostgreSQL database and one Redis (a change indexed by one reaches a
session held by the other) and ``mcp_stdio``. The pieces without a server
(debounce, the per-session bound, stream claims) are checked on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import anyio
import httpx
import pytest
import redis
from django.urls import reverse
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ResourceListChangedNotification, ResourceUpdatedNotification, ServerNotification

from mcp_gateway import notify, sessions, standalone
from tests.mcp_http import PROTOCOL, REPO, Server, base_env, serve_daphne, stop, wait_for_index, write_corpus
from tests.support import TLS, wait_until
from tests.up_process import Up

REDIS_URL = "redis://127.0.0.1:6379/15"
UPDATED = "notifications/resources/updated"
LIST_CHANGED = "notifications/resources/list_changed"
SECRET = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n"
WATCHED = ("updated", "unsubscribed", "sliced", "replayed", "other_stream")
# A short keep-alive, so a deleted session's stream ends within a second or two.
FAST = {"DIR2MCP_SSE_KEEPALIVE": "0.5"}


# -- a server and a stream reader -------------------------------------------------------


def write_files(root: Path) -> None:
    write_corpus(root)
    (root / "watched").mkdir()
    for name in WATCHED:  # one file per test, so the module's tests never hear each other
        (root / "watched" / f"{name}.txt").write_text(f"{name}\n")
    (root / "node_modules").mkdir()
    (root / "node_modules" / "dep.js").write_text("module.exports = 1\n")
    (root / "config.txt").write_text(SECRET)


def start_up(start, root: Path, env: dict | None = None):
    """``up`` on ``root``, once its first pass is done and the watcher is in place."""
    up = start("--dir", str(root), "--json", env={**FAST, **(env or {})})
    url = up.url()
    up.event("watch_ready")
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    return up, Server(root, url, token, up.proc)


@contextlib.contextmanager
def serving(root: Path):
    """An ``up`` over :func:`write_files`' corpus at ``root``, which must stop
    cleanly with no traceback."""
    write_files(root)
    up, server = start_up(Up, root)
    try:
        yield server
        assert up.stop() == 0
        assert "Traceback" not in up.stderr, up.stderr[-3000:]
    finally:
        up.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One ``up`` for the tests that change files no other test here reads."""
    with serving(tmp_path_factory.mktemp("served")) as server:
        yield server


class Stream:
    """A raw ``GET /mcp`` read on a thread: its status, then each SSE event
    (a dict of its fields; ``data`` parsed when it is JSON), then None at its end."""

    def __init__(self, server: Server, session: str, last_event_id: str | None = None):
        headers = server.headers(
            **{"MCP-Session-Id": session, "MCP-Protocol-Version": PROTOCOL, "Accept": "text/event-stream"}
        )
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self.events: queue.Queue = queue.Queue()
        self.status: queue.Queue = queue.Queue()
        self.comments = 0
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=None), verify=TLS)
        self._thread = threading.Thread(target=self._read, args=(server.url, headers), daemon=True)
        self._thread.start()
        self.code, self.body = self.status.get(timeout=30)

    def _read(self, url: str, headers: dict) -> None:
        try:
            with self._client.stream("GET", url, headers=headers) as response:
                if response.status_code != 200:
                    self.status.put((response.status_code, response.read()))
                    return
                self.status.put((200, response.headers["content-type"]))
                self._parse(response.iter_lines())
        except httpx.HTTPError:
            pass  # closed by the test
        finally:
            self._client.close()
            self.status.put((None, None))
            self.events.put(None)

    def _parse(self, lines) -> None:
        event: dict = {}
        for line in lines:
            if line.startswith(":"):
                self.comments += 1
            elif line:
                name, _, value = line.partition(":")
                event[name] = value.removeprefix(" ")
            elif event:
                if event.get("data"):
                    event["data"] = httpx.Response(200, content=event["data"]).json()
                self.events.put(event)
                event = {}

    def next(self, timeout: float = 30) -> dict | None:
        return self.events.get(timeout=timeout)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        """The next event carrying ``method`` (others are kept in ``skipped``)."""
        end = time.monotonic() + timeout
        self.skipped = []
        while (left := end - time.monotonic()) > 0:
            event = self.events.get(timeout=left)
            assert event is not None, f"the stream ended before {method}"
            if isinstance(event.get("data"), dict) and event["data"].get("method") == method:
                return event
            self.skipped.append(event)
        raise AssertionError(f"no {method} within {timeout}s")

    def ended(self, timeout: float = 30) -> bool:
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                if self.events.get(timeout=left) is None:
                    return True
            except queue.Empty:
                return False
        return False

    def close(self) -> None:
        self._client.close()
        self._thread.join(10)


def subscribe(server: Server, session: str, uri: str, method: str = "resources/subscribe") -> dict:
    response = server.post(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"uri": uri}}, session=session
    )
    assert response.status_code == 200, response.text
    return response.json()


def indexed(server: Server, session: str, text: str, timeout: float = 60) -> None:
    """Wait until ``dir2mcp.find`` sees ``text`` in the stored text (the change is committed)."""
    wait_until(
        lambda: server.call(session, "dir2mcp.find", {"content": text})["structuredContent"].get("matches"),
        timeout=timeout,
        message=f"{text!r} to be indexed",
    )


# -- the stream itself ----------------------------------------------------------------------


def test_get_opens_a_stream_that_starts_with_a_priming_event(served):
    session = served.initialize()
    stream = Stream(served, session)
    try:
        assert stream.code == 200 and stream.body.startswith("text/event-stream")
        priming = stream.next()
        assert priming["id"].startswith(priming["id"].split(".")[0] + ".") and priming["data"] == ""
        assert int(priming["retry"]) > 0
    finally:
        stream.close()


def test_a_second_stream_of_one_session_is_refused_with_409(served):
    session = served.initialize()
    first = Stream(served, session)
    try:
        first.next()
        second = Stream(served, session)
        assert second.code == 409
        assert b'"error"' in second.body
        other = Stream(served, served.initialize())  # another session has its own
        assert other.code == 200
        other.close()
    finally:
        first.close()


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        pytest.param({"Accept": "application/json"}, 406, id="accept-without-event-stream"),
        pytest.param({"MCP-Session-Id": None}, 400, id="no-session"),
        pytest.param({"MCP-Session-Id": "sess_unknown"}, 404, id="unknown-session"),
        pytest.param({"MCP-Protocol-Version": "1999-01-01"}, 400, id="bad-protocol-version"),
    ],
)
def test_a_get_the_transport_refuses_never_opens_a_stream(served, headers, status):
    session = served.initialize()
    sent = served.headers(**{"MCP-Session-Id": session, "MCP-Protocol-Version": PROTOCOL})
    sent["Accept"] = "text/event-stream"
    sent.update({k: v for k, v in headers.items() if v is not None})
    for name in [k for k, v in headers.items() if v is None]:
        sent.pop(name)
    response = httpx.get(served.url, headers=sent, timeout=30, verify=TLS)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["code"] < 0


# -- notifications --------------------------------------------------------------------------


def test_a_subscribed_file_changed_on_disk_sends_updated_and_only_for_it(served):
    session = served.initialize()
    stream = Stream(served, session)
    try:
        stream.next()
        assert subscribe(served, session, "dir2mcp:///watched/updated.txt") == {
            "jsonrpc": "2.0",
            "id": 7,
            "result": {},
        }
        (served.root / "docs" / "guide.md").write_text("# Guide\n\nrewritten without subscribers\n")
        (served.root / "watched/updated.txt").write_text("hnsw index notes\nchanged line\n")
        event = stream.wait_for(UPDATED)
        assert event["data"]["params"] == {"uri": "dir2mcp:///watched/updated.txt"}
        assert event["id"].split(".")[0] == event["id"].split(".")[0] and "." in event["id"]
        assert not any(e.get("data", {}).get("method") == UPDATED for e in stream.skipped if e.get("data"))
    finally:
        stream.close()


def test_a_file_added_or_removed_sends_list_changed(served):
    session = served.initialize()
    stream = Stream(served, session)
    try:
        stream.next()
        (served.root / "added.md").write_text("# Added\n")
        stream.wait_for(LIST_CHANGED)
        (served.root / "added.md").unlink()
        stream.wait_for(LIST_CHANGED)
    finally:
        stream.close()


def test_unsubscribe_stops_updated(served):
    session = served.initialize()
    stream = Stream(served, session)
    try:
        stream.next()
        subscribe(served, session, "dir2mcp:///watched/unsubscribed.txt")
        assert (
            subscribe(served, session, "dir2mcp:///watched/unsubscribed.txt", "resources/unsubscribe")[
                "result"
            ]
            == {}
        )
        (served.root / "watched/unsubscribed.txt").write_text("after unsubscribing: zebra\n")
        indexed(served, session, "zebra")
        (served.root / "later.md").write_text("# Later\n")  # announced after the change above
        stream.wait_for(LIST_CHANGED)
        assert [e for e in stream.skipped if e.get("data")] == []
    finally:
        stream.close()


@pytest.mark.parametrize(
    ("uri", "code"),
    [
        pytest.param("dir2mcp:///node_modules/dep.js", -32002, id="excluded"),
        pytest.param("dir2mcp:///config.txt", -32002, id="secret-bearing"),
        pytest.param("dir2mcp:///../outside.txt", -32002, id="outside-the-root"),
        pytest.param("dir2mcp:///src/%2e%2e/%2e%2e/etc/passwd", -32002, id="encoded-traversal"),
        pytest.param("dir2mcp:///missing.txt", -32002, id="not-indexed"),
        pytest.param("file:///etc/passwd", -32002, id="another-scheme"),
        pytest.param("dir2mcp:///watched/unsubscribed.txt?lines=9-1", -32602, id="bad-slice"),
        pytest.param(42, -32602, id="not-a-string"),
        pytest.param("dir2mcp:///" + "a" * 3000, -32602, id="too-long"),
    ],
)
def test_a_subscription_to_what_may_not_be_read_is_refused(served, uri, code):
    session = served.initialize()
    answer = subscribe(served, session, uri)
    assert answer["error"]["code"] == code, answer
    assert "Traceback" not in answer["error"]["message"]


def test_a_slice_uri_is_notified_under_the_uri_subscribed(served):
    session = served.initialize()
    stream = Stream(served, session)
    try:
        stream.next()
        assert subscribe(served, session, "dir2mcp:///watched/sliced.txt?lines=1-2")["result"] == {}
        (served.root / "watched/sliced.txt").write_text("sliced\nnotes\n")
        assert stream.wait_for(UPDATED)["data"]["params"]["uri"] == "dir2mcp:///watched/sliced.txt?lines=1-2"
    finally:
        stream.close()


# -- resumption --------------------------------------------------------------------------------


def test_last_event_id_replays_what_the_stream_missed(served):
    session = served.initialize()
    stream = Stream(served, session)
    primed = stream.next()["id"]
    subscribe(served, session, "dir2mcp:///watched/replayed.txt")
    stream.close()
    (served.root / "watched/replayed.txt").write_text("missed while away: quokka\n")
    indexed(served, session, "quokka")
    # The announcement follows the commit through the indexer's pipe; with no
    # stream open there is no event to wait on, so resume until the replay
    # holds it (a resume that finds nothing new gets only its priming event).
    first: dict = {}

    def resumed() -> Stream | None:
        stream = Stream(served, session, last_event_id=primed)
        event = stream.next() if stream.code == 200 else None
        if event is not None and isinstance(event.get("data"), dict):
            first.update(event)
            return stream
        stream.close()
        return None

    again = wait_until(resumed, timeout=30, interval=0.2, message="the announcement in the replay")
    try:
        assert again.code == 200
        replayed = first
        assert replayed["data"]["params"] == {"uri": "dir2mcp:///watched/replayed.txt"}
        key, seq = replayed["id"].split(".")
        assert key == primed.split(".")[0] and int(seq) > int(primed.split(".")[1])
        assert again.next()["data"] == ""  # then this connection's priming event
    finally:
        again.close()


def test_resuming_takes_over_a_stream_the_server_still_holds(served):
    # A client resumes only a stream it gave up on (a dead connection the
    # server has not noticed yet): the resume wins, not a 409.
    session = served.initialize()
    first = Stream(served, session)
    primed = first.next()["id"]
    second = Stream(served, session, last_event_id=primed)
    try:
        assert second.code == 200
        assert first.ended(timeout=10)
    finally:
        first.close()
        second.close()


def test_an_id_of_another_stream_replays_nothing(served):
    session = served.initialize()
    first = Stream(served, session)
    old = first.next()["id"]
    subscribe(served, session, "dir2mcp:///watched/other_stream.txt")
    first.close()
    (served.root / "watched/other_stream.txt").write_text("missed on the old stream: wombat\n")
    indexed(served, session, "wombat")
    fresh = Stream(served, session)  # no Last-Event-ID: a new stream, with its own ids
    assert fresh.next()["id"].split(".")[0] != old.split(".")[0]
    fresh.close()

    def reopened():
        # The client closed `fresh`; the server notices when it next writes
        # to it, and until then refuses a second stream (409): wait for that.
        stream = Stream(served, session, last_event_id=old)
        if stream.code == 409:
            stream.close()
            return None
        return stream

    resumed = wait_until(reopened, timeout=30, interval=0.2, message="the closed stream's release")
    try:
        assert resumed.code == 200, (resumed.code, resumed.body)
        event = resumed.next()
        assert event["data"] == {"jsonrpc": "2.0", "method": LIST_CHANGED}  # "list and read again"
        assert resumed.next()["data"] == ""
    finally:
        resumed.close()


# -- how a stream ends ------------------------------------------------------------------------


def test_delete_ends_the_stream(served):
    session = served.initialize()
    stream = Stream(served, session)
    stream.next()
    response = httpx.delete(
        served.url,
        headers=served.headers(**{"MCP-Session-Id": session, "MCP-Protocol-Version": PROTOCOL}),
        timeout=30,
        verify=TLS,
    )
    assert response.status_code == 204
    assert stream.ended(timeout=10)
    stream.close()


def test_a_session_gone_from_the_database_ends_its_stream(served):
    session = served.initialize()
    stream = Stream(served, session)
    stream.next()
    # What the sweep of any process does to an expired session.
    with sqlite3.connect(served.root / ".dir2mcp" / "meta.sqlite") as db:
        db.execute("DELETE FROM mcp_sessions WHERE session_id = ?", (session,))
    assert stream.ended(timeout=15)
    stream.close()


def test_stopping_the_server_ends_open_streams_and_exits_promptly(tmp_path, running):
    write_corpus(tmp_path)
    up, server = start_up(running, tmp_path)
    stream = Stream(server, server.initialize())
    stream.next()
    assert up.stop(signal.SIGINT, timeout=30) == 0  # an open stream does not hold the server up
    assert stream.ended(timeout=5)
    stream.close()
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


# -- the official client ---------------------------------------------------------------------------


def test_the_official_client_gets_updated_on_the_stream_it_opens(served):
    async def scenario() -> None:
        got: asyncio.Queue = asyncio.Queue()

        async def on_message(message) -> None:
            if isinstance(message, ServerNotification):
                await got.put(message.root)

        headers = {"Authorization": f"Bearer {served.token}"}
        async with httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(30, read=300), verify=TLS
        ) as http:
            async with streamable_http_client(served.url, http_client=http) as (read, write, _):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    init = await session.initialize()
                    assert init.capabilities.resources.subscribe is True
                    assert init.capabilities.resources.listChanged is True
                    await session.subscribe_resource("dir2mcp:///src/loader.py")
                    note = await first_updated(served.root / "src" / "loader.py", got)
                    assert str(note.params.uri) == "dir2mcp:///src/loader.py"
                    await session.unsubscribe_resource("dir2mcp:///src/loader.py")

    anyio.run(scenario)


async def first_updated(path: Path, got: asyncio.Queue) -> ResourceUpdatedNotification:
    """Change ``path`` until an ``updated`` arrives: the client opens its GET
    stream on its own after ``initialized``, and a change made before that
    has no stream to go to."""
    with anyio.fail_after(60):
        for attempt in range(60):
            path.write_text(f"def load():\n    return {attempt}\n")
            with anyio.move_on_after(3):
                while not isinstance(note := await got.get(), ResourceUpdatedNotification):
                    pass
                return note
    raise AssertionError("no updated")


# -- two processes on one PostgreSQL database and one Redis -----------------------------------------


@pytest.mark.slow
def test_a_change_indexed_by_one_process_reaches_a_session_held_by_another(tmp_path, running, pg_database):
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:  # .ci/run starts Redis; by hand it may be down
        pytest.skip(f"no Redis at {REDIS_URL}: {exc}")
    write_corpus(tmp_path)
    shared = {"DATABASE_URL": pg_database, "REDIS_URL": REDIS_URL, "DIR2MCP_ROOT": str(tmp_path), **FAST}
    up, indexing = start_up(running, tmp_path, env=shared)
    # The second process serves the same database and indexes nothing.
    other = serve_daphne(tmp_path, base_env(DIR2MCP_AUTH="auto", **shared))
    try:
        session = other.initialize()
        stream = Stream(other, session)
        stream.next()
        subscribe(other, session, "dir2mcp:///notes.txt")
        (tmp_path / "notes.txt").write_text("seen by the first process only\n")
        assert stream.wait_for(UPDATED)["data"]["params"] == {"uri": "dir2mcp:///notes.txt"}
        # A subscription made through the first process counts on the second's stream.
        subscribe(indexing, session, "dir2mcp:///docs/guide.md")
        (tmp_path / "docs" / "guide.md").write_text("# Guide\n\nchanged again\n")
        assert stream.wait_for(UPDATED)["data"]["params"] == {"uri": "dir2mcp:///docs/guide.md"}
        stream.close()
    finally:
        err = stop(other)
    assert "Traceback" not in err, err[-3000:]
    assert up.stop() == 0


# -- stdio ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_stdio_delivers_updated_to_its_session(tmp_path):
    root = tmp_path / "root"  # its log beside it, not in it
    root.mkdir()
    write_corpus(root)
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(REPO / "manage.py"), "mcp_stdio", "--dir", str(root)],
        env=base_env(),
        cwd=str(REPO),
    )

    async def scenario() -> None:
        got: asyncio.Queue = asyncio.Queue()

        async def on_message(message) -> None:
            if isinstance(message, ServerNotification):
                await got.put(message.root)

        with open(tmp_path / "stderr.log", "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, message_handler=on_message) as session:
                    await session.initialize()
                    await wait_for_index(session)
                    await session.subscribe_resource("dir2mcp:///notes.txt")
                    (root / "notes.txt").write_text("changed under stdio\n")
                    (root / "new.md").write_text("# New\n")
                    seen: set = set()
                    with anyio.fail_after(60):
                        while seen != {ResourceUpdatedNotification, ResourceListChangedNotification}:
                            note = await got.get()
                            seen.add(type(note))
                            if isinstance(note, ResourceUpdatedNotification):
                                assert str(note.params.uri) == "dir2mcp:///notes.txt"
                    await quiet(got)

    anyio.run(scenario)


async def quiet(got: asyncio.Queue, seconds: float = 2.5) -> None:
    """Until no notification has come for ``seconds`` (past the debounce
    window's trailing one): the SDK's stdio client fails on its way out when
    a message arrives as it closes."""
    while True:
        with anyio.move_on_after(seconds):
            await got.get()
            continue
        return


# -- the pieces on their own ---------------------------------------------------------------------------


class Collected:
    """A sink that keeps what it is sent."""

    def __init__(self):
        self.sent: list[dict] = []
        self.closed = False

    def send(self, notification: dict) -> None:
        self.sent.append(notification)

    def close(self) -> None:
        self.closed = True


def test_ten_saves_in_a_second_make_at_most_two_updated():
    # The hub's own clock: on the real one a loaded machine could stretch
    # the ten saves past the window, and the test would depend on its speed.
    now = [100.0]
    hub = notify.Hub(debounce=0.3, clock=lambda: now[0])
    sink, subs = Collected(), notify.LocalSubscriptions()
    subs.add("dir2mcp:///a.txt", "a.txt")
    hub._sinks["s"] = (sink, subs)
    for i in range(10):
        now[0] = 100.0 + i * 0.025
        hub._take({"type": notify.CHANGED, "paths": ["a.txt"], "listing": False})
    assert sink.sent == [notify.updated("dir2mcp:///a.txt")]  # the first at once
    now[0] = 100.29
    hub._take(None)
    assert len(sink.sent) == 1  # the rest held until the window ends
    now[0] = 100.3  # the end of the debounce window
    hub._take(None)
    assert sink.sent == [notify.updated("dir2mcp:///a.txt")] * 2  # the rest folded into one
    hub._take({"type": notify.CHANGED, "paths": ["b.txt"], "listing": True})
    assert sink.sent[-1] == notify.LIST_CHANGED  # b.txt has no subscriber
    hub._take({"type": notify.ENDED, "session": "s"})
    assert sink.closed


def test_a_slow_client_holds_a_bounded_backlog_and_is_told_to_list_again():
    outbox = standalone.Outbox("sess_x")
    for i in range(standalone.REPLAY_EVENTS * 3):
        outbox.send(notify.updated(f"dir2mcp:///f{i}.txt"))
    assert len(outbox._log) == standalone.REPLAY_EVENTS
    entries, cursor = outbox.take(0, own_priming=-1)
    assert entries[-1][1] == notify.LIST_CHANGED  # some were dropped unsent
    assert entries[0][1] == notify.updated(f"dir2mcp:///f{standalone.REPLAY_EVENTS * 2 + 1}.txt")
    assert not outbox.can_resume(1) and outbox.can_resume(cursor)


def test_a_notification_still_waiting_is_not_queued_twice():
    outbox = standalone.Outbox("sess_x")
    for _ in range(5):
        outbox.send(notify.LIST_CHANGED)
    assert len(outbox._log) == 1


@pytest.mark.django_db
def test_one_stream_holder_per_session_until_its_claim_goes_stale():
    limits = sessions.Limits(inactivity=3600, max_lifetime=0)
    row = sessions.create(protocol_version=PROTOCOL, client_info={}, token=None, limits=limits)
    assert sessions.claim_stream(row.session_id, "one")
    assert not sessions.claim_stream(row.session_id, "two")
    assert sessions.claim_stream(row.session_id, "two", take_over=True)  # a resume takes over
    assert not sessions.renew_stream(row.session_id, "one", limits)
    assert sessions.renew_stream(row.session_id, "two", limits)
    type(row).objects.filter(session_id=row.session_id).update(stream_seen_unix=0)
    assert sessions.claim_stream(row.session_id, "three")  # "two" went stale
    sessions.release_stream(row.session_id, "three")
    assert sessions.claim_stream(row.session_id, "four")
    expired = sessions.Limits(inactivity=3600, max_lifetime=0.001)
    time.sleep(0.01)  # past the 1 ms lifetime
    assert not sessions.renew_stream(row.session_id, "four", expired)  # expired: the stream ends


def test_event_ids_name_their_stream():
    assert standalone.parse_event_id("a1b2c3.17") == ("a1b2c3", 17)
    for bad in (None, "", "17", "a1b2c3.", "a.b.c", "x.-1", "x." + "9" * 13):
        assert standalone.parse_event_id(bad) is None


@pytest.mark.django_db
def test_subscriptions_belong_to_their_session_and_show_read_only_in_the_admin(admin_client):
    limits = sessions.Limits(inactivity=3600, max_lifetime=0)
    row = sessions.create(protocol_version=PROTOCOL, client_info={}, token=None, limits=limits)
    sessions.subscribe(row.session_id, "dir2mcp:///a.txt", "a.txt")
    sessions.subscribe(row.session_id, "dir2mcp:///a.txt", "a.txt")  # once
    assert sessions.subscribers([row.session_id, "sess_other"], ["a.txt", "b.txt"]) == [
        (row.session_id, "dir2mcp:///a.txt")
    ]
    page = admin_client.get(reverse("admin:mcp_gateway_mcpsubscription_changelist"))
    assert page.status_code == 200 and "dir2mcp:///a.txt" in page.content.decode()
    assert admin_client.get(reverse("admin:mcp_gateway_mcpsubscription_add")).status_code == 403
    sessions.end(row.session_id)
    assert sessions.subscribers([row.session_id], ["a.txt"]) == []
