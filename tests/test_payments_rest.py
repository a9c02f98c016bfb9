"""x402 on the REST mirror (``/api/v1/``): every route is sold like the tool it runs.

A real daphne server with ``x402.mode: required`` and the fake facilitator
at the network edge. Without payment a priced route gets 402 and
``PAYMENT-REQUIRED``; a paid retry (``PAYMENT-SIGNATURE``) gets the tool's
result and ``PAYMENT-RESPONSE``; a tool error is not settled; a route whose
tool is free under the policy stays free, and one whose tool is priced
(``stats`` here) does not. Everything lands in the same audit.
"""

from __future__ import annotations

import base64
import contextlib
import json
import sqlite3

import httpx
import pytest
from x402.http import (
    decode_payment_required_header,
    decode_payment_response_header,
    encode_payment_signature_header,
)

from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import start_daphne, stop, write_corpus
from tests.support import TLS
from tests.x402_client import BASE_SEPOLIA, PAY_TO, payment_header, sign_custom

pytestmark = pytest.mark.slow

RESOURCE_BASE = "https://files.example"
# (method, path, query or body, tool, atomic price)
PRICED = [
    ("GET", "/search", {"query": "loader"}, "dir2mcp.search", "10000"),
    ("POST", "/search", {"query": "loader"}, "dir2mcp.search", "10000"),
    ("POST", "/ask", {"question": "what reads files?", "mode": "search_only"}, "dir2mcp.ask", "50000"),
    ("GET", "/files/slice", {"rel_path": "notes.txt"}, "dir2mcp.open_file", "10000"),
    ("GET", "/find", {"content": "loader"}, "dir2mcp.find", "10000"),
    ("GET", "/stats", {}, "dir2mcp.stats", "10000"),
]


@pytest.fixture(scope="module")
def facilitator():
    with running_facilitator() as fake:
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory, facilitator):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    env = {
        "DIR2MCP_X402_MODE": "required",
        "DIR2MCP_X402_FACILITATOR_URL": facilitator.url,
        "DIR2MCP_X402_RESOURCE_BASE_URL": RESOURCE_BASE,
        "DIR2MCP_X402_NETWORK": BASE_SEPOLIA,
        "DIR2MCP_X402_PRICE": "0.01",
        "DIR2MCP_X402_PAY_TO": PAY_TO,
        # ask costs more; list_files is free; stats keeps the default price
        "DIR2MCP_X402__ROUTE_POLICY__TOOLS_CALL__PRICES": '{dir2mcp.ask: "0.05", dir2mcp.list_files: "0"}',
    }
    srv = start_daphne(root, env=env)
    srv.session = srv.initialize()
    yield srv
    err = stop(srv)
    assert "Traceback" not in err, err[-3000:]


def rest(server, method: str, path: str, params: dict, **headers: str) -> httpx.Response:
    url = f"{server.base}/api/v1{path}"
    headers = {"Authorization": f"Bearer {server.token}", **headers}
    if method == "POST":
        return httpx.post(url, json=params, headers=headers, timeout=60, verify=TLS)
    return httpx.get(url, params=params, headers=headers, timeout=60, verify=TLS)


def settlement_rows(server) -> list[dict]:
    with contextlib.closing(sqlite3.connect(server.root / ".dir2mcp" / "meta.sqlite")) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute("SELECT * FROM payments_settlementlog ORDER BY id")]


def envelope(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code
    return body["error"]


def mcp_call(server, name: str, arguments: dict, **headers: str) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return server.post(body, session=server.session, **headers)


@pytest.mark.parametrize(("method", "path", "params", "tool", "amount"), PRICED)
def test_unpaid_priced_route_is_402_with_payment_required(
    server, facilitator, method, path, params, tool, amount
):
    before = len(settlement_rows(server))
    response = rest(server, method, path, params)
    error = envelope(response, 402, "UNAUTHORIZED")
    assert error["retryable"] is False and "PAYMENT-SIGNATURE" in error["message"]
    raw = json.loads(base64.b64decode(response.headers["PAYMENT-REQUIRED"]))
    assert raw["x402Version"] == 2
    assert raw["resource"]["url"] == f"{RESOURCE_BASE}/api/v1{path}"
    assert tool in raw["resource"]["description"]
    (offer,) = raw["accepts"]
    expected = (BASE_SEPOLIA, PAY_TO.lower(), amount)
    assert (offer["network"], offer["payTo"].lower(), offer["amount"]) == expected
    # The MCP endpoint asks the same price for the same tool.
    via_mcp = mcp_call(server, tool, params)
    assert via_mcp.status_code == 402
    assert decode_payment_required_header(via_mcp.headers["PAYMENT-REQUIRED"]).accepts[0].amount == amount
    rows = settlement_rows(server)[before:]
    assert [(r["tool"], r["status"]) for r in rows] == [(tool, "required"), (tool, "required")]


def test_a_route_whose_tool_is_free_stays_free(server):
    before = len(settlement_rows(server))
    response = rest(server, "GET", "/files", {})
    assert response.status_code == 200 and "PAYMENT-REQUIRED" not in response.headers
    via_mcp = mcp_call(server, "dir2mcp.list_files", {})
    assert via_mcp.status_code == 200
    assert response.json() == via_mcp.json()["result"]["structuredContent"]
    assert len(settlement_rows(server)) == before


def test_paid_retry_gets_the_result_and_payment_response_and_a_replay_runs_nothing(server, facilitator):
    unpaid = rest(server, "GET", "/search", {"query": "loader"})
    signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
    settled_before = facilitator.count("/settle")
    paid = rest(server, "GET", "/search", {"query": "loader"}, **{"PAYMENT-SIGNATURE": signature})
    assert paid.status_code == 200, paid.text
    body = paid.json()
    assert body["query"] == "loader" and body["hits"]
    receipt = decode_payment_response_header(paid.headers["PAYMENT-RESPONSE"])
    assert receipt.success is True and receipt.network == BASE_SEPOLIA
    assert facilitator.count("/settle") == settled_before + 1
    row = settlement_rows(server)[-1]
    assert (row["tool"], row["status"], row["transaction"]) == (
        "dir2mcp.search",
        "settled",
        receipt.transaction,
    )

    verified_before = facilitator.count("/verify")
    again = rest(server, "GET", "/search", {"query": "loader"}, **{"PAYMENT-SIGNATURE": signature})
    assert again.status_code == 200 and again.json() == body
    assert again.headers["PAYMENT-RESPONSE"] == paid.headers["PAYMENT-RESPONSE"]
    assert (
        facilitator.count("/settle") == settled_before + 1 and facilitator.count("/verify") == verified_before
    )

    # the same payment for another request, on this route or the MCP endpoint: used up,
    # a fresh challenge for that request and nothing of the stored answer
    other = rest(server, "GET", "/search", {"query": "hnsw"}, **{"PAYMENT-SIGNATURE": signature})
    error = envelope(other, 402, "UNAUTHORIZED")
    assert "payment_already_used" in error["message"] and "hits" not in other.text
    required = decode_payment_required_header(other.headers["PAYMENT-REQUIRED"])
    assert required.error == "payment_already_used"
    assert required.resource.url == f"{RESOURCE_BASE}/api/v1/search"
    assert "PAYMENT-RESPONSE" not in other.headers
    find = rest(server, "GET", "/find", {"content": "loader"}, **{"PAYMENT-SIGNATURE": signature})
    assert "payment_already_used" in envelope(find, 402, "UNAUTHORIZED")["message"]
    via_mcp = mcp_call(server, "dir2mcp.search", {"query": "hnsw"}, **{"PAYMENT-SIGNATURE": signature})
    assert via_mcp.status_code == 402 and via_mcp.json()["error"]["data"]["error"] == "payment_already_used"
    assert (
        facilitator.count("/settle") == settled_before + 1 and facilitator.count("/verify") == verified_before
    )


def test_rejected_payment_is_402_naming_the_reason(server, facilitator):
    unpaid = rest(server, "POST", "/ask", {"question": "what reads files?", "mode": "search_only"})
    cheap = sign_custom(unpaid.headers["PAYMENT-REQUIRED"], value="1")
    settled_before = facilitator.count("/settle")
    response = rest(
        server,
        "POST",
        "/ask",
        {"question": "what reads files?", "mode": "search_only"},
        **{"PAYMENT-SIGNATURE": encode_payment_signature_header(cheap)},
    )
    error = envelope(response, 402, "UNAUTHORIZED")
    reason = "invalid_exact_evm_payload_authorization_value_mismatch"
    assert reason in error["message"]
    assert decode_payment_required_header(response.headers["PAYMENT-REQUIRED"]).error == reason
    assert facilitator.count("/settle") == settled_before
    assert settlement_rows(server)[-1]["error_reason"] == reason


UNREADABLE = {"not-base64": "%%%", "not-a-payment": base64.b64encode(b'{"x402Version": 2}').decode()}


@pytest.mark.parametrize("header", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_undecodable_payment_is_402_with_a_fresh_challenge_over_rest(server, facilitator, header):
    verified_before = facilitator.count("/verify")
    response = rest(server, "GET", "/find", {"content": "loader"}, **{"PAYMENT-SIGNATURE": header})
    error = envelope(response, 402, "UNAUTHORIZED")
    assert "invalid_payload" in error["message"] and error["retryable"] is False
    required = decode_payment_required_header(response.headers["PAYMENT-REQUIRED"])
    assert required.error == "invalid_payload"
    assert required.resource.url == f"{RESOURCE_BASE}/api/v1/find" and required.accepts[0].amount == "10000"
    assert facilitator.count("/verify") == verified_before
    assert settlement_rows(server)[-1]["error_reason"] == "invalid_payload"
    paid = rest(
        server, "GET", "/find", {"content": "loader"}, **{"PAYMENT-SIGNATURE": payment_header(required)}
    )
    assert paid.status_code == 200, paid.text


@pytest.mark.parametrize("header", list(UNREADABLE.values()), ids=list(UNREADABLE))
def test_undecodable_payment_is_402_with_a_fresh_challenge_over_mcp(server, facilitator, header):
    body = {
        "jsonrpc": "2.0",
        "id": 8,
        "method": "tools/call",
        "params": {"name": "dir2mcp.find", "arguments": {"content": "loader"}},
    }
    response = server.post(body, session=server.session, **{"PAYMENT-SIGNATURE": header})
    assert response.status_code == 402, response.text
    error = response.json()["error"]
    assert error["code"] == 402 and error["data"]["error"] == "invalid_payload"
    required = decode_payment_required_header(response.headers["PAYMENT-REQUIRED"])
    assert required.error == "invalid_payload" and required.resource.url == f"{RESOURCE_BASE}/mcp"
    paid = server.post(body, session=server.session, **{"PAYMENT-SIGNATURE": payment_header(required)})
    assert paid.status_code == 200 and not paid.json()["result"].get("isError")
    assert decode_payment_response_header(paid.headers["PAYMENT-RESPONSE"]).success is True


def test_a_tool_error_keeps_its_own_status_and_is_never_settled(server, facilitator):
    params = {"rel_path": "no-such-file.txt"}
    unpaid = rest(server, "GET", "/files/slice", params)
    signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
    settled_before = facilitator.count("/settle")
    response = rest(server, "GET", "/files/slice", params, **{"PAYMENT-SIGNATURE": signature})
    envelope(response, 404, "FILE_NOT_FOUND")
    assert "PAYMENT-RESPONSE" not in response.headers
    assert facilitator.count("/settle") == settled_before
    assert settlement_rows(server)[-1]["error_reason"] == "tool_error"


def test_settle_outage_then_retry_settles_without_running_the_tool_again(server, facilitator):
    unpaid = rest(server, "GET", "/stats", {})
    signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
    verified_before, settled_before = facilitator.count("/verify"), facilitator.count("/settle")
    facilitator.fail_next(500, path="/settle")
    down = rest(server, "GET", "/stats", {}, **{"PAYMENT-SIGNATURE": signature})
    error = envelope(down, 502, "PROVIDER_FAILED")
    assert error["retryable"] is True and down.headers["Retry-After"]
    assert "PAYMENT-RESPONSE" not in down.headers
    retried = rest(server, "GET", "/stats", {}, **{"PAYMENT-SIGNATURE": signature})
    assert retried.status_code == 200, retried.text
    assert {"root", "indexing", "models"} <= set(retried.json())
    assert decode_payment_response_header(retried.headers["PAYMENT-RESPONSE"]).success is True
    # verified (and so run) once; settlement asked twice
    assert facilitator.count("/verify") == verified_before + 1
    assert facilitator.count("/settle") == settled_before + 2
    statuses = [r["status"] for r in settlement_rows(server)[-5:]]
    assert statuses == ["verified", "settling", "failed", "settling", "settled"]


def test_cors_lets_a_browser_send_and_read_the_payment_headers(server):
    preflight = httpx.options(
        f"{server.base}/api/v1/search",
        headers={"Origin": "http://localhost:5173", "Access-Control-Request-Method": "GET"},
        verify=TLS,
    )
    assert "PAYMENT-SIGNATURE" in preflight.headers["access-control-allow-headers"]
    unpaid = rest(server, "GET", "/search", {"query": "loader"}, Origin="http://localhost:5173")
    exposed = unpaid.headers["access-control-expose-headers"]
    assert unpaid.status_code == 402 and "PAYMENT-REQUIRED" in exposed and "PAYMENT-RESPONSE" in exposed


def test_the_audit_never_holds_the_query_text(server):
    rest(server, "GET", "/find", {"content": "zebra-secret-needle"})
    log = (server.root / ".dir2mcp" / "payments" / "settlement.log").read_text()
    assert "zebra-secret-needle" not in log
    assert all("zebra-secret-needle" not in json.dumps(row) for row in settlement_rows(server))
