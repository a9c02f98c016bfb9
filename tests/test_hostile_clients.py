"""Hostile round of 2026-11-29: one client holding the token, against every
other client of the same real ``up`` (docs/security.md, "Hostile round,
2026-11-29: one client against the others").

Each test runs a real ``up`` (daphne, the gate, the connection bounds) and
shows a bound that one client could step around before the fix: the rate
limit and the per-client share of call slots were kept per spelling of the
``Authorization`` header, so ``Bearer``, ``bearer`` and ``Bearer  <token>``
were three clients.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from kernel import errors
from mcp_gateway.ratelimit import MAX_CLIENTS, RateLimiter
from tests.fakes.mistral import FakeMistral
from tests.mcp_http import ACCEPT, PROTOCOL, write_corpus
from tests.support import TLS, wait_until
from tests.test_modern import META, VERSION

pytestmark = pytest.mark.slow

WAIT = 60.0  # a socket's bound: only a starved or broken server reaches it
CHAT = "/v1/chat/completions"


def spellings(token: str, count: int) -> list[str]:
    """``count`` spellings of one bearer credential that the gate accepts:
    the scheme in three cases, and more spaces before the token each time."""
    cases = ("Bearer", "bearer", "BEARER")
    return [f"{cases[i % 3]} {' ' * (i // 3)}{token}" for i in range(count)]


def stateless(method: str, params: dict, msg_id: int = 1) -> tuple[dict, dict]:
    """A 2026-07-28 request (no session): its body and headers but the credential."""
    body = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": {**params, "_meta": META}}
    headers = {
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return body, headers


def token_of(root) -> str:
    return (root / ".dir2mcp" / "secret.token").read_text().strip()


def test_one_token_spelled_many_ways_is_one_client_to_the_rate_limit(tmp_path, running):
    root = tmp_path / "corpus"
    write_corpus(root)
    # One request a minute: a burst of five (the bucket's floor), then 429.
    up = running("--dir", str(root), "--json", env={"DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "1"})
    url = up.url()
    base = url.removesuffix("/mcp")
    token = token_of(root)
    body, mcp_headers = stateless("tools/list", {})
    statuses = []
    with httpx.Client(timeout=WAIT, verify=TLS) as client:
        for i, authorization in enumerate(spellings(token, 12)):
            if i % 2:  # the MCP endpoint and the REST mirror share the budget
                answer = client.post(url, headers={**mcp_headers, "Authorization": authorization}, json=body)
            else:
                answer = client.get(f"{base}/api/v1/stats", headers={"Authorization": authorization})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                error = answer.json()["error"]  # the REST envelope, or JSON-RPC's
                code = error["data"]["code"] if "data" in error else error["code"]
                assert code == errors.RATE_LIMITED, answer.text
                assert answer.headers["Retry-After"]
    # Twelve requests at once from one client (a refill takes a minute): the
    # sixth is over the budget whatever the spelling of its credential.
    assert 429 in statuses, statuses
    assert all(status == 200 for status in statuses[:5]), statuses


@pytest.fixture
def fake():
    fake = FakeMistral().start()
    yield fake
    fake.close()  # releases the held chat requests


def send(url: str, path: str, body: dict, headers: dict) -> http.client.HTTPConnection:
    """POST ``body`` whole, and return the connection to read its answer later."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT)
    conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
    return conn


def answer(conn: http.client.HTTPConnection) -> tuple[int, dict]:
    try:
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        conn.close()


def up_with_two_call_slots(tmp_path, running, fake, call_timeout: str):
    """``up`` over a small corpus, asks answered by the fake Mistral (which a
    test holds with ``delay_next``), two call slots a client, calls ended at
    ``call_timeout``; the first pass done. Returns (the server, its root)."""
    root = tmp_path / "corpus"
    write_corpus(root)
    env = {
        "MISTRAL_API_KEY": fake.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
        "DIR2MCP_SERVER__MAX_CALLS_PER_CLIENT": "2",
        "DIR2MCP_SERVER__CALL_TIMEOUT": call_timeout,  # the held asks end at it
    }
    up = running("--dir", str(root), "--json", env=env)
    up.event("scan_progress", lambda data: data.get("running") is False)
    return up, root


def test_one_token_spelled_many_ways_holds_one_share_of_the_call_slots(tmp_path, running, fake):
    up, root = up_with_two_call_slots(tmp_path, running, fake, "20s")
    url = up.url()
    token = token_of(root)
    first, second, third = spellings(token, 3)
    question = {"question": "what does the loader read?"}
    fake.delay_next(600, count=8)

    # The REST mirror: two asks held at the provider fill this client's share.
    rest_headers = {"Content-Type": "application/json", "Accept": "application/json"}
    held = [send(url, "/api/v1/ask", question, {**rest_headers, "Authorization": first}) for _ in range(2)]
    wait_until(lambda: len(fake.requests_to(CHAT)) >= 2, timeout=WAIT, message="the asks reach the provider")
    status, body = answer(send(url, "/api/v1/ask", question, {**rest_headers, "Authorization": second}))
    assert status == 503 and body["error"]["code"] == errors.SERVER_BUSY, (status, body)
    assert "max_calls_per_client" in body["error"]["message"]

    # The stateless MCP endpoint, the same (since session 22 one share with
    # the REST mirror's: tests/test_hostile_session22.py).
    call, mcp_headers = stateless("tools/call", {"name": "dir2mcp.ask", "arguments": question})
    status, body = answer(send(url, "/mcp", call, {**mcp_headers, "Authorization": third}))
    assert body["error"]["data"]["code"] == errors.SERVER_BUSY, (status, body)
    assert len(fake.requests_to(CHAT)) == 2  # the refused calls never reached the provider
    for conn in held:  # answered at their deadline
        answer(conn)


# -- answers that stay open -------------------------------------------------------------

CAP = 16  # server.max_connections here (the least the default would give)


class Opened:
    """An answer whose head has arrived: a stream left open, or a refusal read whole."""

    def __init__(self, conn: http.client.HTTPConnection):
        self.conn = conn
        self.response = conn.getresponse()
        self.status = self.response.status
        self.streaming = self.response.getheader("Content-Type", "").startswith("text/event-stream")
        self.body = {} if self.streaming else json.loads(self.response.read() or b"{}")
        if not self.streaming:
            conn.close()

    def code(self) -> str | None:
        error = self.body.get("error") or {}
        return (error.get("data") or {}).get("code") or error.get("code")


def open_listen(url: str, token: str, msg_id: int) -> Opened:
    """A ``subscriptions/listen`` request, its answer's head arrived."""
    params = {"notifications": {"resourcesListChanged": True}}
    body, headers = stateless("subscriptions/listen", params, msg_id)
    return Opened(send(url, "/mcp", body, {**headers, "Authorization": f"Bearer {token}"}))


def initialize(url: str, token: str) -> Opened:
    """The answer to an ``initialize`` (a new session), read whole."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "Content-Type": "application/json"}
    return Opened(send(url, "/mcp", init, headers))


def open_get_stream(url: str, token: str, last_event_id: str | None = None) -> Opened:
    """A new session's standalone stream (``GET /mcp``), its head arrived."""
    made = initialize(url, token)
    if made.status != 200:
        return made
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=WAIT)
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "MCP-Session-Id": made.response.getheader("MCP-Session-Id"),
    }
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    conn.request("GET", parts.path, headers=headers)
    return Opened(conn)


def test_streams_one_client_opens_never_take_every_connection(tmp_path, running):
    root = tmp_path / "corpus"
    write_corpus(root)
    up = running("--dir", str(root), "--json", env={"DIR2MCP_SERVER__MAX_CONNECTIONS": str(CAP)})
    url = up.url()
    token = token_of(root)
    answers = []
    try:
        # One client asks for as many streams as the server has connections:
        # subscriptions, and the standalone streams of sessions of its own.
        for i in range(CAP):
            answers.append(open_listen(url, token, i) if i % 2 else open_get_stream(url, token))
        # Another client is still served.
        body, headers = stateless("tools/list", {})
        other = httpx.post(
            url, headers={**headers, "Authorization": f"Bearer {token}"}, json=body, timeout=WAIT
        )
        assert other.status_code == 200 and "tools" in other.json()["result"], other.text
        streams = [a for a in answers if a.streaming]
        assert len(streams) <= CAP // 2, len(streams)
        for refused in (a for a in answers if not a.streaming):  # in the surface's own words
            assert refused.code() == errors.SERVER_BUSY, (refused.status, refused.body)
            assert refused.response.getheader("Retry-After") == "1"
        # A stream that ends gives its place back, however it ended.
        for answer in answers:
            answer.conn.close()
        assert wait_until(lambda: reopened(url, token), timeout=WAIT, message="their places given back")
    finally:
        for answer in answers:
            answer.conn.close()


def reopened(url: str, token: str) -> bool:
    """Whether this client may open as many streams as at first now."""
    probes = [open_listen(url, token, i) for i in range(CAP // 2)]
    for probe in probes:
        probe.conn.close()
    return all(probe.streaming for probe in probes)


# -- the rate limiter's table ---------------------------------------------------------


def test_a_full_table_of_clients_never_gives_a_throttled_client_a_fresh_budget():
    """Past MAX_CLIENTS buckets the limiter made room by forgetting every
    client, so whoever brought the 50,001st address (or username, for the
    admin's sign-in throttle) gave every throttled client its burst back."""
    limiter = RateLimiter(per_minute=60)  # a burst of 6, then one a second
    now = time.monotonic()
    while limiter.retry_after("throttled", now) == 0:
        pass
    for i in range(MAX_CLIENTS - 1):  # other clients, each with most of its burst left
        assert limiter.retry_after(f"client-{i}", now) == 0
    assert limiter.retry_after("one-more", now) == 0  # a new client is still served
    assert limiter.retry_after("throttled", now) > 0  # and the throttled one is still throttled
    # Clients whose buckets have refilled are the first forgotten: as good as new anyway.
    later = now + 3600
    assert limiter.retry_after("another", later) == 0
    assert limiter.retry_after("throttled", later) == 0


# -- websockets ---------------------------------------------------------------------------


def websocket_upgrade(url: str, path: str, *headers: str) -> bytes:
    """The raw answer to a WebSocket handshake on ``path``."""
    parts = urlsplit(url)
    extra = "".join(f"{header}\r\n" for header in headers)
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
    with socket.create_connection((parts.hostname, parts.port), timeout=WAIT) as sock:
        sock.sendall(request.encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            data = sock.recv(65536)
            if not data:
                break
            answer += data
    return answer


def test_a_websocket_handshake_is_refused_by_the_gate_on_every_route(tmp_path, running):
    """daphne speaks WebSocket, and the gate let every scope but HTTP through
    unchecked: a handshake from anyone reached Django, which raised, so each
    one was a bare 500 and a traceback in the server's log."""
    root = tmp_path / "corpus"
    write_corpus(root)
    up = running("--dir", str(root), "--json")
    url = up.url()
    token = token_of(root)
    for path in ("/mcp", "/api/v1/files", "/admin/", "/healthz", "/nowhere"):
        for headers in ((), (f"Authorization: Bearer {token}",), ("Origin: http://evil.example",)):
            answer = websocket_upgrade(url, path, *headers)
            assert answer.startswith(b"HTTP/1.1 403"), (path, headers, answer[:200])
    assert httpx.get(url.removesuffix("/mcp") + "/healthz/live", timeout=WAIT).status_code == 200
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
    assert "websocket" not in up.stderr.lower(), up.stderr[-3000:]


# -- what anyone can make the server log ---------------------------------------------------


def raw_get(url: str, target: str) -> bytes:
    """The raw answer to ``GET target`` sent as it is (no client normalises it)."""
    parts = urlsplit(url)
    request = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    with socket.create_connection((parts.hostname, parts.port), timeout=WAIT) as sock:
        sock.sendall(request.encode())
        answer = b""
        while data := sock.recv(65536):
            answer += data
    return answer


def test_a_suspicious_request_from_anyone_is_one_line_in_the_log(tmp_path, running):
    """Django refuses a static path that climbs out of its directories (400),
    and logs it on ``django.security.SuspiciousFileOperation`` with its
    traceback: about 50 lines in the server's log for each such request
    from anyone, where a refused Host header was already one line."""
    root = tmp_path / "corpus"
    write_corpus(root)
    up = running("--dir", str(root), "--json")
    url = up.url()
    for target in ("/static/../../../etc/passwd", "/static/admin/../../../../settings.py"):
        answer = raw_get(url, target)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"root:" not in answer
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
    refusals = [line for line in up.err if "SuspiciousFileOperation" in line]
    assert len(refusals) == 2, up.stderr[-3000:]  # one line each, saying what was refused


# -- work no deadline stops --------------------------------------------------------------


def test_a_diff_of_two_files_built_to_be_costly_is_answered_within_its_deadline(tmp_path, running):
    """difflib's matching is quadratic on a file and the same file with a
    line inserted after each (5,000 lines took 37 s, 50,000 about an hour),
    in pure Python that no deadline stops: each such call held a call slot
    and a core long after its client was told DEADLINE_EXCEEDED. Now the
    matching has a work budget, past which the lines between the first and
    the last change are one hunk: a right diff, not a minimal one."""
    root = tmp_path / "corpus"
    write_corpus(root)
    lines = [f"value_{i} = compute({i})" for i in range(20_000)]
    (root / "before.py").write_text("\n".join(lines) + "\n")
    (root / "after.py").write_text("\n".join(x for line in lines for x in (line, "log(value)")) + "\n")
    env = {"DIR2MCP_SERVER__CALL_TIMEOUT": "60s"}
    up = running("--dir", str(root), "--json", env=env)
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    base = url.removesuffix("/mcp")
    headers = {"Authorization": f"Bearer {token_of(root)}"}
    query = {"rel_path_a": "before.py", "rel_path_b": "after.py", "max_chars": 2000}
    answer = httpx.get(f"{base}/api/v1/files/diff", params=query, headers=headers, timeout=120, verify=TLS)
    assert answer.status_code == 200, answer.text[:500]
    result = answer.json()
    # One hunk from the first line that differs (it is right: 20,000 more lines), not a minimal one.
    assert result["added"] - result["removed"] == 20_000 and result["removed"] > 0, result
    assert result["diff"].startswith("--- before.py\n+++ after.py\n@@ -1,"), result["diff"][:200]
    assert result["truncated"] is True  # max_chars
    health = httpx.get(f"{base}/healthz", timeout=WAIT, verify=TLS).json()
    assert health["checks"]["tool_calls"]["ok"], health  # no call left running past its deadline


def test_verify_refuses_citations_with_numbers_no_file_has(tmp_path, running):
    """``verify`` read a citation's numbers with ``int``: 5,000 digits were
    Python's digit limit, an INTERNAL_ERROR with a traceback; a clock of
    49,000 ``9:`` parts cost seconds of big-integer arithmetic. A citation
    is now lines and pages of at most 18 digits and a clock of at most
    three parts, else that citation is INVALID_FIELD."""
    root = tmp_path / "corpus"
    write_corpus(root)
    up = running("--dir", str(root), "--json")
    base = up.url().removesuffix("/mcp")
    headers = {"Authorization": f"Bearer {token_of(root)}"}
    texts = [
        "see [notes.txt@t=" + "9" * 5000 + "-1]",
        "see [notes.txt:L" + "9" * 5000 + "-L1]",
        "see [notes.txt#p=" + "9" * 5000 + "]",
        "see [notes.txt@t=" + "9:" * 3000 + "9-1]",
    ]
    for text in texts:
        answer = httpx.post(f"{base}/api/v1/verify", json={"text": text}, headers=headers, timeout=WAIT)
        assert answer.status_code == 200, answer.text[:300]
        (citation,) = answer.json()["citations"]
        assert citation["error"]["code"] == errors.INVALID_FIELD and not citation["ok"], citation["error"]
    fine = "it reads configuration [docs/guide.md:L1-L3] and [notes.txt@t=0:00-1:00:00]"
    answer = httpx.post(f"{base}/api/v1/verify", json={"text": fine}, headers=headers, timeout=WAIT)
    assert answer.json()["citations"][0]["ok"], answer.text
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


def test_digits_python_calls_digits_but_int_refuses_are_no_numbers(tmp_path, running):
    """``str.isdigit`` is true of superscripts and circled digits that
    ``int`` refuses: ``find``'s ``modified_after`` and a stream's
    ``Last-Event-ID`` checked with it, then read with ``int``, so "²" was
    an INTERNAL_ERROR and a traceback."""
    root = tmp_path / "corpus"
    write_corpus(root)
    up = running("--dir", str(root), "--json")
    url = up.url()
    token = token_of(root)
    credential = {"Authorization": f"Bearer {token}"}
    for value in ("²", "-①", "٣"):
        arguments = {"modified_after": value}
        call, headers = stateless("tools/call", {"name": "dir2mcp.find", "arguments": arguments})
        answer = httpx.post(url, json=call, headers={**headers, **credential}, timeout=WAIT).json()
        error = answer["result"]["structuredContent"]["error"]
        assert error["code"] == errors.INVALID_FIELD and "modified_after" in error["message"], answer
    for last_event_id in ("abc.²", "abc.¹²", "²"):  # a stream the server does not have: a fresh one
        opened = open_get_stream(url, token, last_event_id)
        assert opened.status == 200 and opened.streaming, (last_event_id, opened.status, opened.body)
        opened.conn.close()
    assert up.stop() == 0
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
