"""Issue #34, Seen 2: no client stalls another, and SIGTERM stops `up`.

One real `up` (daphne, the gate, the indexing child) on a small corpus, with
a fake Mistral at the network edge as the chat model. Then:

1. six ``ask`` calls whose chat requests the fake holds for ten minutes:
   calls stuck on a provider, as a slow one would leave them;
2. six hostile calls of each kind the issue names, all sent before the next
   step: ``resources/read`` of a 16,000-segment URI over MCP and a
   4,000-segment one over REST, ``open_file`` and ``transcribe`` of a
   16,000-segment path, the ``explain`` prompt on a 2,048-segment path
   (before the fix: seconds to minutes each, on the loop's six shared
   threads, with no deadline);
3. another client's ``initialize``, ``tools/list``, ``resources/list`` and
   ``search`` complete, and ``/healthz/live`` answers;
4. every hostile call has its answer: ``INVALID_FIELD`` (the path bounds);
   the stuck asks are answered ``DEADLINE_EXCEEDED`` (``server.call_timeout``
   is 15 s here) and ``/healthz`` says degraded while their threads are still
   held at the provider: they started before step 3 and outlive it;
5. SIGTERM ends the process although those threads are still stuck.

Nothing is timed: the waits are bounds a broken server runs into. The
admission rule itself (a client's share, the process limit) is checked on
``mcp_gateway.workers`` directly at the end.
"""

from __future__ import annotations

import http.client
import json
import signal
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, urlsplit

import httpx
import pytest

from kernel import errors
from mcp_gateway import workers
from tests.fakes.mistral import FakeMistral
from tests.mcp_http import ACCEPT, PROTOCOL, write_corpus
from tests.support import TLS, wait_until

WAIT = 60.0  # a socket's bound: only a starved server reaches it
STOP_WAIT = 60.0  # how long SIGTERM may take before the test fails (the fix: a few seconds)
CHAT = "/v1/chat/completions"
COPIES = 6  # of each hostile call, as the issue ran them


@pytest.fixture
def fake():
    fake = FakeMistral().start()
    yield fake
    fake.close()  # releases the held chat requests


def deep(segments: int) -> str:
    return "/".join(["a"] * segments)


class Mcp:
    """A client of the MCP endpoint whose requests are sent now and read later."""

    def __init__(self, url: str, token: str):
        parts = urlsplit(url)
        self.host, self.port, self.path, self.token = parts.hostname, parts.port, parts.path, token
        self.session: str | None = None
        self.next_id = 0

    def headers(self) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": ACCEPT,
            "Content-Type": "application/json",
            "MCP-Protocol-Version": PROTOCOL,
        }
        return headers | ({"MCP-Session-Id": self.session} if self.session else {})

    def send(self, method: str, params: dict, path: str | None = None) -> http.client.HTTPConnection:
        """Send one request whole (http.client returns once it is written)."""
        self.next_id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=WAIT)
        conn.request("POST", path or self.path, body=body.encode(), headers=self.headers())
        return conn

    def get(self, target: str) -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=WAIT)
        conn.request("GET", target, headers={"Authorization": f"Bearer {self.token}"})
        return conn

    def open(self) -> Mcp:
        params = {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        status, body, headers = receive(self.send("initialize", params))
        assert status == 200 and "result" in body, body
        self.session = headers["mcp-session-id"]
        return self

    def call(self, method: str, params: dict) -> dict:
        status, body, _ = receive(self.send(method, params))
        assert status == 200, body
        return body


def receive(conn: http.client.HTTPConnection) -> tuple[int, dict, dict]:
    """The answer to what ``conn`` sent: status, JSON body, headers (lowercase)."""
    try:
        response = conn.getresponse()
        data = response.read()
        headers = {name.lower(): value for name, value in response.getheaders()}
        return response.status, json.loads(data) if data else {}, headers
    finally:
        conn.close()


def rpc_code(body: dict) -> str | None:
    """The dir2mcp code of a JSON-RPC error, or of a tool's error result."""
    if "error" in body:
        return (body["error"].get("data") or {}).get("code")
    result = body.get("result") or {}
    if result.get("isError"):
        return result["structuredContent"]["error"]["code"]
    return None


def health(base: str) -> httpx.Response:
    return httpx.get(f"{base}/healthz", timeout=WAIT, verify=TLS)


def test_hostile_and_stuck_calls_never_starve_another_client_and_sigterm_ends_up(tmp_path, running, fake):
    root = tmp_path / "corpus"
    write_corpus(root)
    env = {
        "MISTRAL_API_KEY": fake.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
        # long enough for an ask to reach the provider on a loaded machine (a stop
        # event set earlier would keep it from there), short beside the fake's hold
        "DIR2MCP_SERVER__CALL_TIMEOUT": "15s",
    }
    up = running("--dir", str(root), "--json", env=env)
    url = up.url()
    base = url.removesuffix("/mcp")
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()

    # 1. Six asks, held at the provider.
    fake.delay_next(600, count=COPIES)
    asker = Mcp(url, token).open()
    ask = {"name": "dir2mcp.ask", "arguments": {"question": "what does the loader read?"}}
    stuck = [asker.send("tools/call", ask) for _ in range(COPIES)]
    wait_until(
        lambda: len(fake.requests_to(CHAT)) >= COPIES, timeout=WAIT, message="the asks reach the provider"
    )

    # 2. Six hostile calls of each kind, every one sent whole before the other client starts.
    deepest = deep(16_000)
    kinds = {
        "resources/read (MCP)": (Mcp(url, token).open(), "resources/read", {"uri": f"dir2mcp:///{deepest}"}),
        "open_file": (
            Mcp(url, token).open(),
            "tools/call",
            {"name": "dir2mcp.open_file", "arguments": {"rel_path": deepest}},
        ),
        "transcribe": (
            Mcp(url, token).open(),
            "tools/call",
            {"name": "dir2mcp.transcribe", "arguments": {"rel_path": deepest}},
        ),
        "explain": (
            Mcp(url, token).open(),
            "prompts/get",
            {"name": "explain", "arguments": {"path": deep(2_048)}},
        ),
    }
    sent = {
        kind: [client.send(method, params) for _ in range(COPIES)]
        for kind, (client, method, params) in kinds.items()
    }
    rest_uri = quote(f"dir2mcp:///{deep(4_000)}", safe="/:")
    assert len(rest_uri) <= 8192  # the REST mirror's bound on a URI, before and after the fix
    rest = Mcp(url, token)
    sent["resources/read (REST)"] = [
        rest.get(f"/api/v1/resources/read?uri={rest_uri}") for _ in range(COPIES)
    ]

    # 3. Another client is served meanwhile.
    other = Mcp(url, token).open()
    assert "tools" in other.call("tools/list", {})["result"]
    assert "resources" in other.call("resources/list", {})["result"]
    found = other.call("tools/call", {"name": "dir2mcp.search", "arguments": {"query": "loader", "k": 3}})
    assert not found["result"].get("isError"), found
    assert found["result"]["structuredContent"]["hits"], found
    assert httpx.get(f"{base}/healthz/live", timeout=WAIT, verify=TLS).status_code == 200

    # 4. Every hostile call was answered with the bound it broke.
    with ThreadPoolExecutor(len(sent) * COPIES) as pool:
        answers = {kind: list(pool.map(receive, conns)) for kind, conns in sent.items()}
    for kind, replies in answers.items():
        for status, body, _ in replies:
            code = body["error"]["code"] if kind.endswith("(REST)") else rpc_code(body)
            assert code == errors.INVALID_FIELD, (kind, status, body)
    # The asks were answered at their deadline, while their threads stay held
    # at the provider: they started before the other client and outlive it.
    with ThreadPoolExecutor(COPIES) as pool:
        for status, body, _ in pool.map(receive, stuck):
            assert status == 200 and rpc_code(body) == errors.DEADLINE_EXCEEDED, body
    degraded = health(base)
    assert degraded.status_code == 503 and degraded.json()["status"] == "degraded", degraded.text
    assert degraded.json()["checks"]["tool_calls"]["overdue"] == COPIES, degraded.text
    assert len(fake.requests_to(CHAT)) == COPIES  # none has been answered and retried

    # 5. SIGTERM ends `up` although six threads are still stuck.
    code = up.stop(signal.SIGTERM, timeout=STOP_WAIT)
    assert code == 0, up.stderr[-3000:]
    assert "Traceback" not in up.stderr, up.stderr[-3000:]
    assert "without waiting for 6 call(s)" in up.stdout + up.stderr


def alone(name: str) -> workers.Client:
    """A client that is its own host (a REST or stateless caller)."""
    return workers.Client(name, name)


def test_one_client_holds_at_most_its_share_and_another_is_still_admitted():
    bounds = workers.Bounds(limit=8, share=3, deadline=0)
    greedy, other = alone("greedy"), alone("other")
    held = []
    try:
        for _ in range(3):
            workers.admit(bounds, greedy)
            held.append(greedy)
        with pytest.raises(workers.Refused) as refused:
            workers.admit(bounds, greedy)
        assert refused.value.code == errors.SERVER_BUSY and refused.value.retryable
        assert "max_calls_per_client" in refused.value.message
        workers.admit(bounds, other)  # the greedy client's share is not everyone's
        held.append(other)
        workers.release(held.pop(0))
        workers.admit(bounds, greedy)  # a finished call gives its client a slot back
        held.append(greedy)
    finally:
        for client in held:
            workers.release(client)
    assert workers.Slots.by_client == {} and workers.Slots.by_host == {}


def test_the_sessions_of_one_host_leave_another_host_a_share():
    """Until session 22 each session was a client and nothing more: three
    sessions of one host held all eight slots. A host now holds every slot
    but one client's share, over all its sessions."""
    bounds = workers.Bounds(limit=8, share=3, deadline=0)
    sessions = [workers.Client("host-a", f"sess_{i}") for i in range(3)]
    held = []
    try:
        for session in sessions:
            for _ in range(3):
                try:
                    workers.admit(bounds, session)
                except workers.Refused as refused:
                    assert "this address already has 5 calls" in refused.message
                    continue
                held.append(session)
        assert len(held) == bounds.host_share == 5
        for _ in range(3):  # a full share for the next host
            workers.admit(bounds, alone("host-b"))
            held.append(alone("host-b"))
    finally:
        for client in held:
            workers.release(client)
    assert workers.Slots.by_client == {} and workers.Slots.by_host == {}


def test_the_process_limit_refuses_every_client_once_reached():
    bounds = workers.Bounds(limit=2, share=2, deadline=0)
    workers.admit(bounds, alone("a"))
    workers.admit(bounds, alone("b"))
    try:
        with pytest.raises(workers.Refused):
            workers.admit(bounds, alone("c"))
        assert workers.readiness()["degraded"] is True
    finally:
        workers.release(alone("a"))
        workers.release(alone("b"))
    assert workers.readiness()["ok"] is True
