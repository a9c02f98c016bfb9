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
from urllib.parse import urlsplit

import httpx
import pytest

from kernel import errors
from tests.fakes.mistral import FakeMistral
from tests.mcp_http import ACCEPT, write_corpus
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


def test_one_token_spelled_many_ways_holds_one_share_of_the_call_slots(tmp_path, running, fake):
    root = tmp_path / "corpus"
    write_corpus(root)
    env = {
        "MISTRAL_API_KEY": fake.API_KEY,
        "DIR2MCP_MISTRAL__BASE_URL": fake.url,
        "DIR2MCP_CHAT__PROVIDER": "mistral",
        "DIR2MCP_SERVER__MAX_CALLS_PER_CLIENT": "2",
        "DIR2MCP_SERVER__CALL_TIMEOUT": "20s",  # the held asks end at it
    }
    up = running("--dir", str(root), "--json", env=env)
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
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

    # The stateless MCP endpoint, the same.
    call, mcp_headers = stateless("tools/call", {"name": "dir2mcp.ask", "arguments": question})
    held += [send(url, "/mcp", call, {**mcp_headers, "Authorization": first}) for _ in range(2)]
    wait_until(lambda: len(fake.requests_to(CHAT)) >= 4, timeout=WAIT, message="the asks reach the provider")
    status, body = answer(send(url, "/mcp", call, {**mcp_headers, "Authorization": third}))
    assert body["error"]["data"]["code"] == errors.SERVER_BUSY, (status, body)
    assert len(fake.requests_to(CHAT)) == 4  # the refused calls never reached the provider
    for conn in held:  # answered at their deadline
        answer(conn)
