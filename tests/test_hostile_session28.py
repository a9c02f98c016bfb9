"""Hostile round of 2026-11-30, session 28: the HTTP transport under a real
``up`` (daphne, the gate, the connection bounds) against clients that read
slowly or never, send slowly, or send without the token; see
docs/security.md, "Hostile round, 2026-11-30 (session 28): the HTTP
transport". Each test shows a way in that was open before its fix.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from dir2mcp_site.logfilters import Throttled
from tests.support import wait_until
from tests.test_hostile_clients import open_listen, stateless, token_of

pytestmark = pytest.mark.slow

WAIT = 60.0  # a socket's or a wait's bound: only a starved or broken server reaches it


def raw_request(
    url: str, method: str, path: str, headers: dict[str, str], body: bytes = b"", version: str = "HTTP/1.1"
) -> bytes:
    """A request as it goes on the wire; ``Content-Length`` unless given."""
    parts = urlsplit(url)
    fields = {"Host": f"{parts.hostname}:{parts.port}", **headers}
    if body and "Content-Length" not in fields and "Transfer-Encoding" not in fields:
        fields["Content-Length"] = str(len(body))
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"{method} {path} {version}\r\n{head}\r\n".encode() + body


def connect(url: str, receive_buffer: int | None = None) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket()
    if receive_buffer:  # set before connecting, so the window the server sees is small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(WAIT)
    sock.connect((parts.hostname, parts.port))
    return sock


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        assert chunk, data[-2000:]
        data += chunk
    return data


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed or reset ``sock``, without reading what it holds."""
    poller = select.poll()
    poller.register(sock, select.POLLERR | select.POLLHUP | select.POLLRDHUP)
    return bool(poller.poll(0))


def listen_request(url: str, token: str, uris: list[str], msg_id: int, version: str = "HTTP/1.1") -> bytes:
    params = {"notifications": {"resourceSubscriptions": uris}}
    body, headers = stateless("subscriptions/listen", params, msg_id)
    headers = {**headers, "Authorization": f"Bearer {token}"}
    return raw_request(url, "POST", urlsplit(url).path, headers, json.dumps(body).encode(), version)


class Listener:
    """A subscription whose stream is read as it comes, counting the updates."""

    def __init__(self, url: str, token: str, uri: str):
        self.sock = connect(url)
        self.sock.sendall(listen_request(url, token, [uri], 7))
        self.buffer = read_until(self.sock, b"acknowledged")
        self.updates = 0
        self.open = True
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.buffer += chunk
                self.updates = self.buffer.count(b"notifications/resources/updated")
        except OSError:
            pass
        self.open = False


# -- a stream never read ----------------------------------------------------------------


#: Files changed at once, each named by :data:`SPELLINGS` URIs: 992 of a
#: subscription's 1,000, about 2 MB of updates a change.
FILES = 62
SPELLINGS = 16  # the most URIs naming one file a subscription (session 29)


def deep_files(root: Path, count: int) -> list[str]:
    """Files whose paths are nearly 1,900 characters: each URI naming one,
    and so each update sent about it, weighs about 2 KB."""
    folder = "/".join(f"{i}" + "d" * 229 for i in range(8))
    (root / folder).mkdir(parents=True)
    rels = [f"{folder}/watched{n:02d}.txt" for n in range(count)]
    for rel in rels:
        (root / rel).write_text("first line\n")
    return rels


@pytest.mark.parametrize("version", ["HTTP/1.1", "HTTP/1.0"])
def test_a_stream_its_client_never_reads_is_closed_past_the_unread_bound(tmp_path, running, version):
    """A streamed answer is written whether or not its client reads it, and
    twisted buffered what the socket would not take, without bound. One
    subscription to 16 spellings (``?lines=1-1`` to ``1-15``, and the bare
    URI) of each of 62 files costs about 2 MB of updates per change of them
    (until session 29, a thousand spellings of one file); a client that
    never read its stream made the server hold all of them for as long as
    the connection lasted (measured: 4 such streams with a 100 KB
    subscription id grew `up` by 40 MB per change, for good). Past the
    socket's own buffer a connection may now leave at most
    ``server.max_unread_mb`` of a streamed answer unread (1 MiB here), then
    it is closed; a client that reads is never cut, and others are served.
    An HTTP/1.0 client's stream is not chunked (twisted writes it as it
    comes, to the connection's close): until the review of session 28 it
    was never counted, and so never cut."""
    root = tmp_path / "corpus"
    root.mkdir()
    rels = deep_files(root, FILES)
    up = running("--dir", str(root), "--json", env={"DIR2MCP_SERVER__MAX_UNREAD_MB": "1"})
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = token_of(root)
    uris = [f"dir2mcp:///{rel}" for rel in rels]
    spellings = [u + (f"?lines=1-{n}" if n else "") for u in uris for n in range(SPELLINGS)]
    assert max(len(s) for s in spellings) <= 2048  # notify.MAX_URI_CHARS: each one is honoured

    silent = connect(url, receive_buffer=4096)
    silent.sendall(listen_request(url, token, spellings, 1, version))
    read_until(silent, b"acknowledged")  # from here on it reads nothing
    reader = Listener(url, token, uris[0])
    try:
        for change in range(1, 13):  # up to ~24 MB for the silent stream; the bound needs a few
            for rel in rels:
                with open(root / rel, "a") as file:
                    file.write(f"change {change}\n")
            wait_until(
                lambda change=change: reader.updates >= change,
                timeout=WAIT,
                message=f"the reading client told of change {change}",
            )
            if closed_by_server(silent):
                break
        assert wait_until(lambda: closed_by_server(silent), timeout=WAIT, message="the silent stream closed")
        assert reader.open  # it kept reading: never cut
        assert any("server.max_unread_mb" in line for line in up.err), up.stderr[-3000:]
        assert "Traceback" not in up.stderr, up.stderr[-3000:]
        body, headers = stateless("tools/list", {})
        other = httpx.post(
            url, headers={**headers, "Authorization": f"Bearer {token}"}, json=body, timeout=WAIT
        )
        assert other.status_code == 200 and "tools" in other.json()["result"], other.text
    finally:
        silent.close()
        reader.sock.close()


def test_a_subscription_id_sent_with_every_notification_is_bounded(tmp_path, running):
    """Every notification of a subscription carries its id (the listen
    request's), which could be as long as the body allows: one change of a
    file sent 100 KB per spelling subscribed (4 streams of a 100 KB id and
    100 spellings grew `up` by 40 MB per change, and 2 streams of a 1 MB id
    asked for 100 MB of JSON encoding on the event loop per change). A
    subscription's id is now at most 256 characters of JSON."""
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "notes.txt").write_text("hnsw index notes\n")
    up = running("--dir", str(root), "--json")
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = token_of(root)
    refused = open_listen(url, token, "x" * 100_000)
    assert not refused.streaming and refused.code() == "INVALID_FIELD", refused.body
    assert "256" in refused.body["error"]["message"]
    accepted = open_listen(url, token, "x" * 250)  # with its quotes, 252
    try:
        assert accepted.streaming, accepted.body
    finally:
        accepted.conn.close()


# -- a body before the token --------------------------------------------------------------


def first_answer(sock: socket.socket) -> tuple[bytes, dict]:
    """The status line and JSON body of the first answer on ``sock``, read
    to the server's close (no more of the request is sent meanwhile)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], json.loads(body)


def test_a_request_without_the_token_is_refused_before_its_body_is_read(tmp_path, running):
    """daphne hands a request on only once its whole body is in, so the gate
    judged the token only then: a client without it had up to 4 MiB read
    and buffered (on disk past 100 kB, counted against every client's
    ``server.max_body_buffer_mb``; 50 such bodies cost `up` 0.37 CPU-s
    against 0.01 for 50 empty ones) before its 401, held its connection for
    as long as it trickled the body (here: no answer at all while the body
    was not sent), and was invited to send it with ``100 Continue``. The
    head is now checked as the gate checks it (Host, Origin, token, in that
    order, with the gate's answers) before any of the body is read."""
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "notes.txt").write_text("hnsw index notes\n")
    # No idle timeout within the test's reach: only the head check can answer a body never sent.
    up = running("--dir", str(root), "--json", env={"DIR2MCP_SERVER__IDLE_TIMEOUT": "600s"})
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = token_of(root)
    mcp = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    heads = {  # each announces a body and sends none of it
        "mcp, no token": ("/mcp", {**mcp, "Content-Length": "4000000"}),
        "mcp, wrong token": ("/mcp", {**mcp, "Authorization": "Bearer nope", "Content-Length": "10"}),
        "mcp, 100-continue": ("/mcp", {**mcp, "Expect": "100-continue", "Content-Length": "4000000"}),
        "mcp, chunked": ("/mcp", {**mcp, "Transfer-Encoding": "chunked"}),
        "rest, no token": ("/api/v1/files", {"Content-Type": "application/json", "Content-Length": "1000"}),
    }
    for what, (path, headers) in heads.items():
        sock = connect(url)
        sock.sendall(raw_request(url, "POST", path, headers))
        status, body = first_answer(sock)
        sock.close()
        assert status == b"HTTP/1.1 401 Unauthorized", (what, status)  # never "100 Continue" first
        if path == "/mcp":
            assert body["error"]["data"]["code"] == "UNAUTHORIZED", (what, body)
        else:
            assert body["error"]["code"] == "UNAUTHORIZED", (what, body)

    # The gate's order and answers: a foreign Host, then a foreign Origin, before the token.
    foreign = [
        ({"Host": "evil.example"}, b"HTTP/1.1 400 Bad Request"),
        ({"Origin": "http://evil.example"}, b"HTTP/1.1 403 Forbidden"),
    ]
    for extra, expected in foreign:
        sock = connect(url)
        sock.sendall(raw_request(url, "POST", "/mcp", {**mcp, "Content-Length": "10", **extra}))
        status, _ = first_answer(sock)
        sock.close()
        assert status == expected, (extra, status)

    # A body over the limit, with the token: 413 from its declared length, and
    # no 100 Continue after it (twisted sent one once the head was handled).
    sock = connect(url)
    headers = {
        **mcp,
        "Authorization": f"Bearer {token}",
        "Expect": "100-continue",
        "Content-Length": "5000000",
    }
    sock.sendall(raw_request(url, "POST", "/mcp", headers))
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    assert data.startswith(b"HTTP/1.1 413") and b"100 Continue" not in data, data[-300:]

    # With the token the body is awaited and read, sent late, 100 Continue included.
    ping, headers = stateless("tools/list", {})
    body = json.dumps(ping).encode()
    sock = connect(url)
    headers = {
        **headers,
        "Authorization": f"Bearer {token}",
        "Expect": "100-continue",
        "Content-Length": str(len(body)),
        "Connection": "close",
    }
    sock.sendall(raw_request(url, "POST", "/mcp", headers))
    assert read_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 Continue")
    sock.sendall(body)
    status, answer = first_answer(sock)
    sock.close()
    assert status == b"HTTP/1.1 200 OK" and "tools" in answer["result"], (status, answer)


# -- lines in the log from anyone -----------------------------------------------------------


def test_refusals_anyone_may_cause_are_a_bounded_number_of_lines_in_the_log(tmp_path, running):
    """A request with a foreign ``Host`` is refused (400) before the token
    is asked for, and logged, one line each, so that a misconfigured proxy
    shows: at the sender's rate, from anyone who reaches the port, and from
    any web page the user opens, by DNS rebinding (its requests carry the
    page's own name). 200 such requests were 200 lines (about 300 bytes for
    each request of 100); the log grew without bound. Each kind of refusal
    is now at most ten lines a minute (a budget of ten, given back over the
    minute), the next saying how many were not logged."""
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "notes.txt").write_text("hnsw index notes\n")
    up = running("--dir", str(root), "--json")
    url = up.url()
    for n in range(200):
        sock = connect(url)
        sock.sendall(raw_request(url, "GET", "/healthz/live", {"Host": f"rebound{n}.example"}))
        status = read_until(sock, b"\r\n").split(b"\r\n")[0]
        sock.close()
        assert status == b"HTTP/1.1 400 Bad Request", status
    assert up.stop() == 0
    refusals = [line for line in up.err if "Invalid HTTP_HOST header" in line]
    assert 1 <= len(refusals) <= 10, len(refusals)


def test_a_throttled_logger_says_how_many_lines_it_left_out():
    throttled = Throttled()
    throttled.LINES = 2
    records = [
        logging.LogRecord("django.security.DisallowedHost", logging.WARNING, "", 0, "refused %s", (n,), None)
        for n in range(4)
    ]
    assert [throttled.filter(record) for record in records] == [True, True, False, False]
    throttled.WINDOW = 1e-9  # its budget given back at once
    record = logging.LogRecord(
        "django.security.DisallowedHost", logging.WARNING, "", 0, "refused %s", (9,), None
    )
    assert throttled.filter(record)
    assert record.getMessage() == "refused 9 (2 more like it were not logged)"
    other = logging.LogRecord(
        "django.security.SuspiciousFileOperation", logging.WARNING, "", 0, "x", None, None
    )
    assert throttled.filter(other)  # each logger has its own window
