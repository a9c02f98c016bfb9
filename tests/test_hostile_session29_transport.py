"""Hostile round of 2026-11-30, session 29: the transport, again. What
session 28's round on the HTTP transport left open, and one more way in,
each under a real ``up`` (daphne, the gate, the connection bounds) driven
with raw sockets; see docs/security.md, "Hostile round, 2026-11-30
(session 29): the transport, again". Each test shows a way in that was open
before its fix; none asserts how long anything took.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from mcp_gateway.bounded import OpenConnections
from tests.fakes.redis import FakeRedis
from tests.mcp_http import Server
from tests.support import wait_until
from tests.test_connection_cap import Channel
from tests.test_hostile_clients import Opened, send, stateless, token_of
from tests.test_hostile_session28 import closed_by_server, connect, listen_request, raw_request, read_until

pytestmark = pytest.mark.slow

WAIT = 60.0  # a socket's or a wait's bound: only a starved or broken server reaches it


def one_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """The head and body of the next answer on ``sock``, one of known length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data[-2000:]
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, (head, len(body), length)
        body += chunk
    assert len(body) == length, (head, len(body), length)
    return head, body


def serve(tmp_path: Path, running, env: dict[str, str] | None = None, files: dict[str, bytes] | None = None):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "notes.txt").write_text("hnsw index notes\n")
    for name, data in (files or {}).items():
        (root / name).write_bytes(data)
    up = running("--dir", str(root), "--json", env=env or {})
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    return root, up, url, token_of(root)


# -- answers of known length left unread ------------------------------------------------


def big_read(url: str, token: str, *, keep_alive: bool = True) -> bytes:
    """A read of bytes on the REST mirror as large as an answer's token
    budget allows (200,000 tokens): about 800 KB of JSON."""
    headers = {"Authorization": f"Bearer {token}"}
    if not keep_alive:
        headers["Connection"] = "close"
    query = "rel_path=big.bin&length=1048576&format=base64&max_tokens=200000"
    return raw_request(url, "GET", f"/api/v1/files/bytes?{query}", headers)


#: Reads one silent connection asks for at once, never reading the answers:
#: more than the kernel's buffer for a socket takes on loopback (4 MB).
PIPELINED = 16


def bytes_read(body: bytes) -> int:
    return json.loads(body)["length"]


def test_answers_of_known_length_left_unread_are_bounded_across_connections(tmp_path, running):
    """An answer of known length is handed to twisted whole (the largest a
    tool gives under its token budget are several hundred KB of JSON), and
    twisted holds what the socket does not take until the client reads it
    or the idle timeout closes the connection: never counted by
    ``server.max_unread_mb``, which bounds streams. A client that pipelines
    requests and reads nothing fills the kernel's buffer (a few MB on
    loopback) and leaves the rest in `up`, on every connection it holds,
    until the idle timeout. Now ``server.max_unread_total_mb`` (2 MiB here)
    bounds what all connections leave unread past their sockets' buffers;
    past it, those whose clients have gone longest without reading are
    closed. A client that reads is never cut."""
    _, up, url, token = serve(
        tmp_path,
        running,
        {"DIR2MCP_SERVER__MAX_UNREAD_TOTAL_MB": "2", "DIR2MCP_SERVER__IDLE_TIMEOUT": "600s"},
        {"big.bin": os.urandom(1 << 20)},
    )
    reader = connect(url)
    silent: list[socket.socket] = []
    try:
        for _ in range(4):
            sock = connect(url, receive_buffer=4096)
            sock.sendall(big_read(url, token) * PIPELINED)  # about 6 MB, never read
            silent.append(sock)
            # Meanwhile a client that reads gets every answer whole, on one connection.
            for _ in range(4):
                reader.sendall(big_read(url, token))
                head, body = one_answer(reader)
                assert head.startswith(b"HTTP/1.1 200") and bytes_read(body) > 200_000, head
        # Before: all stayed open, each holding past its socket's buffer, until the idle timeout.
        wait_until(
            lambda: closed_by_server(silent[0]),
            timeout=WAIT,
            message="the oldest connection left unread closed",
        )
        closed = [closed_by_server(sock) for sock in silent]
        assert closed == sorted(closed, reverse=True), closed  # the oldest first
        assert not closed_by_server(reader)
        assert any("server.max_unread_total_mb" in line for line in up.err), up.stderr[-3000:]
        reader.sendall(big_read(url, token, keep_alive=False))
        head, body = one_answer(reader)
        assert head.startswith(b"HTTP/1.1 200") and bytes_read(body) > 200_000, head
        assert "Traceback" not in up.stderr, up.stderr[-3000:]
    finally:
        reader.close()
        for sock in silent:
            sock.close()


# -- the rate limit's count in Redis ------------------------------------------------------


#: How long the fake Redis holds a count at most (a request on a free loop is answered well within it).
HOLD = 15.0


#: What the fake Redis answers to a client's handshake (RESP3, redis-py's default).
HANDSHAKE = {b"HELLO": b"%1\r\n$5\r\nproto\r\n:3\r\n", b"CLIENT": b"+OK\r\n"}


class HeldRedis(FakeRedis):
    """A Redis that answers the client's handshake (``HELLO``, ``CLIENT``),
    and holds its answer to the rate limiter's count (a command naming
    ``dir2mcp:rate:``) until :meth:`release` (at most :data:`HOLD`), then
    closes: a Redis answering slowly. Anything else (the notifications'
    channel layer) gets no answer."""

    def __init__(self) -> None:
        self.asked = threading.Event()  # a count arrived and is being held
        self._released = threading.Event()
        self._held: list[socket.socket] = []
        super().__init__()

    def release(self) -> None:
        self._released.set()

    def holding(self) -> bool:
        """Whether a count is held still: not released, and its client has
        not given up on it (closed its connection at its timeout)."""
        return not self._released.is_set() and any(not closed_by_server(conn) for conn in self._held)

    def serve(self, conn: socket.socket) -> None:
        while (data := self.received(conn)) is not None:
            if b"dir2mcp:rate:" in data:
                self._held.append(conn)
                self.asked.set()
                if not self._released.wait(HOLD):
                    self._released.set()  # given up: what is answered from now on was not while held
                return  # closed: the limiter counts in its process
            lines = data.split(b"\r\n")
            names = [lines[i + 2].upper() for i, line in enumerate(lines[:-2]) if line.startswith(b"*")]
            conn.sendall(b"".join(HANDSHAKE.get(name, b"") for name in names))

    def close(self) -> None:
        self.release()
        super().close()


@pytest.fixture
def held_redis():
    redis = HeldRedis()
    yield redis
    redis.close()


def test_the_rate_limits_count_in_redis_never_holds_the_event_loop(tmp_path, running, held_redis):
    """With ``server.rate_limit_per_minute`` and Redis configured, the gate
    counted each request in Redis on the event loop: while Redis took its
    time to answer (up to the client's timeout, 0.25 s by default, on every
    request for as long as it answered within it), no other request of any
    client was served, ``/healthz/live`` included. The count now runs on a
    thread of the limiter's own: while Redis holds one request's count,
    others are answered. Redis's timeout is long here
    (``DIR2MCP_REDIS_TIMEOUT``, new) so that only the order of events
    decides: before, the loop was held until the client gave up on Redis
    (its connection closed), and only then was ``/healthz/live`` answered."""
    env = {
        "REDIS_URL": held_redis.url,
        "DIR2MCP_REDIS_TIMEOUT": "30",
        "DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "6000",
    }
    _, up, url, token = serve(tmp_path, running, env)
    base = url.removesuffix("/mcp")
    body, headers = stateless("tools/list", {})
    counted: list[httpx.Response] = []

    def limited_request() -> None:
        with httpx.Client(timeout=2 * WAIT) as client:
            counted.append(
                client.post(url, headers={**headers, "Authorization": f"Bearer {token}"}, json=body)
            )

    waiting = threading.Thread(target=limited_request, daemon=True)
    waiting.start()
    try:
        assert held_redis.asked.wait(WAIT), "the gate asked Redis for the count"
        # Redis holds the count until this is answered (or HOLD passes: before, the
        # loop was held that long, and this was answered only after).
        with httpx.Client(timeout=2 * WAIT) as client:
            live = client.get(base + "/healthz/live")
        answered_while_held = held_redis.holding()
        assert live.status_code == 200, live.text
        assert answered_while_held
    finally:
        held_redis.release()
        waiting.join(2 * WAIT)
    assert counted and counted[0].status_code == 200, counted  # counted in the process meanwhile
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


# -- bodies on routes that take no token ----------------------------------------------------


def answer_to_head(url: str, method: str, path: str, headers: dict[str, str]) -> tuple[bytes, dict]:
    """The status line and JSON body answered to a request head announcing
    a body that is never sent, read to the server's close."""
    sock = connect(url)
    try:
        sock.sendall(raw_request(url, method, path, headers))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], json.loads(body)


def test_a_route_that_takes_no_token_takes_no_body_but_the_admins_forms(tmp_path, running):
    """Session 28 checked the token on a request's head, before its body;
    a route that takes no token (any site page, the admin's sign-in, a CORS
    preflight) still had its body read whole, up to 4 MiB, before it was
    answered (a CSRF refusal, a 404, the sign-in page), and a body never
    sent held the connection until the idle timeout (here: no answer at
    all). Now such a route refuses a body on its head (413), but a POST to
    the admin of at most 64 KiB with its length declared (411 without it):
    the sign-in form still works."""
    _, _, url, _ = serve(tmp_path, running, {"DIR2MCP_SERVER__IDLE_TIMEOUT": "600s"})
    origin = f"http://{urlsplit(url).netloc}"
    heads = {  # each announces a body and sends none of it
        "preflight": ("OPTIONS", "/mcp", {"Origin": origin, "Content-Length": "4000000"}, 413),
        "REST preflight": ("OPTIONS", "/api/v1/search", {"Origin": origin, "Content-Length": "10"}, 413),
        "a page": ("POST", "/healthz/live", {"Content-Length": "4000000"}, 413),
        "the status page": ("POST", "/ops/status/", {"Content-Length": "100"}, 413),
        "the API docs": ("POST", "/api/v1/docs", {"Content-Length": "100"}, 413),
        "no page": ("PUT", "/no-such-page", {"Content-Length": "100"}, 413),
        "the sign-in, large": ("POST", "/admin/login/", {"Content-Length": "4000000"}, 413),
        "the sign-in, chunked": ("POST", "/admin/login/", {"Transfer-Encoding": "chunked"}, 411),
    }
    for what, (method, path, headers, expected) in heads.items():
        status, body = answer_to_head(url, method, path, headers)
        assert status.split(b" ")[1] == str(expected).encode(), (what, status, body)
        error = body["error"]  # JSON-RPC's on /mcp, the REST envelope elsewhere
        assert (error["data"]["code"] if path == "/mcp" else error["code"]) in (
            "INVALID_RANGE",
            "INVALID_FIELD",
        )

    # The sign-in form is read and judged: a wrong password is the form again, with its error.
    base = url.removesuffix("/mcp")
    with httpx.Client(timeout=WAIT) as client:
        page = client.get(f"{base}/admin/login/")
        form = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert page.status_code == 200 and form, page.text[:500]
        fields = {
            "username": "nobody",
            "password": "wrong",
            "csrfmiddlewaretoken": form.group(1),
            "next": "/admin/",
        }
        signed = client.post(f"{base}/admin/login/", data=fields)
    assert signed.status_code == 200 and "errornote" in signed.text, signed.text[:2000]


# -- spellings of one file ------------------------------------------------------------------


class Stream:
    """A subscription's stream, read as it comes."""

    def __init__(self, url: str, token: str, uris: list[str]) -> None:
        self.sock = connect(url)
        self.sock.sendall(listen_request(url, token, uris, 7))
        self.buffer = read_until(self.sock, b"acknowledged")
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := self.sock.recv(65536):
                self.buffer += chunk

    def updated(self) -> list[str]:
        """The URIs of the updates so far, in order."""
        return [
            json.loads(line.removeprefix(b"data: "))["params"]["uri"]
            for line in self.buffer.split(b"\n")
            if line.startswith(b"data: ") and b"notifications/resources/updated" in line
        ]


def test_one_file_is_named_at_most_sixteen_times_a_subscription(tmp_path, running):
    """One change of a file is one update for each URI naming it that a
    subscription honours (``?lines=1-1``, ``?lines=1-2``, ...), each encoded
    and written on the event loop: up to 1,000 a subscription, so 16 reading
    streams cost 16,000 updates a change, and another client's ``tools/list``
    waited meanwhile (bench/spellings.py: p99 23 to 566 ms). A subscription
    (a ``subscriptions/listen``, a session's ``resources/subscribe``) now
    names one file at most 16 times; one more is -32602 ``INVALID_RANGE``
    saying so, never a list silently cut."""
    root, up, url, token = serve(tmp_path, running)
    uri = "dir2mcp:///notes.txt"
    spellings = [uri] + [f"{uri}?lines=1-{n}" for n in range(1, 17)]  # 17

    body, headers = stateless("subscriptions/listen", {"notifications": {"resourceSubscriptions": spellings}})
    refused = Opened(send(url, "/mcp", body, {**headers, "Authorization": f"Bearer {token}"}))
    assert not refused.streaming and refused.code() == "INVALID_RANGE", refused.body  # before: acknowledged
    assert "at most 16" in refused.body["error"]["message"], refused.body

    stream = Stream(url, token, spellings[:16])
    try:
        assert stream.buffer.count(b"?lines=") == 15, stream.buffer[-3000:]  # all 16 honoured
        with open(root / "notes.txt", "a") as file:
            file.write("a change\n")
        wait_until(lambda: len(stream.updated()) >= 16, timeout=WAIT, message="the change told")
        assert sorted(stream.updated()[:16]) == sorted(spellings[:16])
    finally:
        stream.sock.close()

    # A session's subscriptions: the same bound.
    srv = Server(root, url, token, up.proc)
    session = srv.initialize()
    answers = [
        srv.post(
            {"jsonrpc": "2.0", "id": n, "method": "resources/subscribe", "params": {"uri": u}},
            session=session,
        )
        for n, u in enumerate(spellings, 1)
    ]
    assert all(a.status_code == 200 and a.json().get("result") == {} for a in answers[:16]), answers[15].text
    error = answers[16].json()["error"]
    assert error["data"]["code"] == "INVALID_RANGE" and "at most 16" in error["message"], error
    again = srv.post(  # one already held is still idempotent
        {"jsonrpc": "2.0", "id": 99, "method": "resources/subscribe", "params": {"uri": uri}}, session=session
    )
    assert again.json().get("result") == {}, again.text


# -- connections that were answered and only linger ----------------------------------------


def test_connections_refused_on_their_head_make_way_for_others(tmp_path, running):
    """A request refused on its head (no token, a body where none is taken,
    one over the size limit) is answered, and its connection lingers
    ``LINGER_SECONDS`` (2 s) reading and dropping what its client still
    sends, so that the client sees the answer rather than a reset. Such a
    connection still counted against ``server.max_connections``, and was
    never one to make way (only connections waiting on their clients
    were): a client without the token that kept opening refused requests
    held every connection, and every other client was answered 503
    ``SERVER_BUSY``. A connection that was answered and only lingers now
    closes first when the room is needed."""
    _, _, url, _ = serve(tmp_path, running, {"DIR2MCP_SERVER__MAX_CONNECTIONS": "8"})
    head = raw_request(url, "POST", "/mcp", {"Content-Type": "application/json", "Content-Length": "10"})
    stop = threading.Event()
    refused: list[socket.socket] = []

    def refuse_forever() -> None:
        while not stop.is_set():
            sock = connect(url)
            refused.append(sock)
            with contextlib.suppress(OSError):
                sock.sendall(head)
                read_until(sock, b"\r\n")  # answered (401, or 503 when the server was full): it lingers
            for old in refused[:-32]:  # the client keeps its side open for a while
                old.close()
            del refused[:-32]

    attacker = threading.Thread(target=refuse_forever, daemon=True)
    attacker.start()
    statuses = []
    try:
        wait_until(lambda: len(refused) >= 16, timeout=WAIT, message="the refused connections opened")
        for _ in range(10):
            sock = connect(url)
            sock.sendall(raw_request(url, "GET", "/healthz/live", {"Connection": "close"}))
            statuses.append(read_until(sock, b"\r\n").split(b"\r\n")[0])
            sock.close()
    finally:
        stop.set()
        attacker.join(WAIT)
        for sock in refused:
            sock.close()
    assert statuses == [b"HTTP/1.1 200 OK"] * 10, statuses  # before: 503 Service Unavailable


def test_a_connection_that_only_lingers_closes_before_any_other_makes_way():
    """The policy alone (stand-in channels, tests/test_connection_cap.py):
    at the limit, a connection answered and lingering closes first; the
    make-way order of those waiting on their clients is unchanged."""
    open_connections = OpenConnections(3, 10)
    lingering, waiting = Channel("answered", waiting=False), Channel("waiting", waiting=True)
    served = Channel("served", waiting=False)
    lingering.refused = lingering.lingering = True
    for channel in (lingering, waiting, served):
        open_connections.opened(channel)
    newcomer = Channel("new", True)
    open_connections.opened(newcomer)
    assert not lingering.lingering and (waiting.answered, newcomer.answered) == (
        "",
        "",
    )  # before: waiting made way
    assert len(open_connections) == 3
    last = Channel("last", True)
    open_connections.opened(last)  # nothing lingers now: the oldest waiting makes way, as before
    assert waiting.answered.startswith("made way") and last.answered == ""
