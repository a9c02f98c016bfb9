"""`up --x402 required` end to end: a real server, the fake facilitator at the
network edge, the official MCP client and the x402 client.

Lifecycle calls go through unpaid; an unpaid tools/call gets HTTP 402 with
PAYMENT-REQUIRED; a paid retry (header) gets the result with
PAYMENT-RESPONSE; the in-band variant (``_meta["x402/payment"]``) works
through the MCP SDK; a replay runs nothing twice; everything is audited.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3

import anyio
import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from x402.http import decode_payment_required_header, decode_payment_response_header

from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import write_corpus
from tests.support import TLS
from tests.test_cli import cli
from tests.x402_client import BASE_SEPOLIA, PAY_TO, payment_header, payment_meta

pytestmark = pytest.mark.slow

ACCEPT = "application/json, text/event-stream"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.fixture
def facilitator():
    with running_facilitator() as fake:
        yield fake


def x402_flags(facilitator) -> tuple[list[str], dict[str, str]]:
    flags = [
        "--x402",
        "required",
        "--x402-facilitator-url",
        facilitator.url,
        "--x402-resource-base-url",
        "https://files.example.com",
        "--x402-network",
        BASE_SEPOLIA,
        "--x402-price",
        "0.01",
    ]
    return flags, {"DIR2MCP_X402_PAY_TO": PAY_TO}


def test_required_without_a_complete_configuration_exits_2_before_writing(tmp_path):
    result = cli("up", "--dir", str(tmp_path), "--x402", "required", "--x402-network", "not-caip2")
    assert result.returncode == 2
    assert (
        "ERROR: CONFIG_INVALID: x402 mode 'required' needs a complete payment configuration" in result.stderr
    )
    assert not (tmp_path / ".dir2mcp").exists()


def test_selling_tool_calls_through_up(tmp_path, running, facilitator):
    write_corpus(tmp_path)
    flags, env = x402_flags(facilitator)
    up = running("--dir", str(tmp_path), "--json", *flags, env=env)
    url = up.url()
    token = (tmp_path / ".dir2mcp" / "secret.token").read_text().strip()
    up.event("scan_progress", lambda data: data.get("running") is False)
    auth = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}

    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        session = http.post(url, json=INIT, headers=auth).headers["MCP-Session-Id"]
        headers = {**auth, "MCP-Session-Id": session}
        assert (
            http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=headers).status_code
            == 200
        )
        listed = http.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, headers=headers)
        assert listed.status_code == 200 and listed.json()["result"]["tools"]

        unpaid = http.post(url, json=call, headers=headers)
        assert unpaid.status_code == 402
        required = decode_payment_required_header(unpaid.headers["PAYMENT-REQUIRED"])
        offer = required.accepts[0]
        assert (offer.network, offer.pay_to.lower(), offer.amount) == (BASE_SEPOLIA, PAY_TO.lower(), "10000")
        assert unpaid.json()["error"]["code"] == 402

        signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
        paid = http.post(url, json=call, headers={**headers, "PAYMENT-SIGNATURE": signature})
        assert paid.status_code == 200, paid.text
        assert paid.json()["result"]["structuredContent"]["hits"]
        receipt = decode_payment_response_header(paid.headers["PAYMENT-RESPONSE"])
        assert receipt.success is True

        replayed = http.post(url, json=call, headers={**headers, "PAYMENT-SIGNATURE": signature})
        assert replayed.status_code == 200 and replayed.json()["result"] == paid.json()["result"]
    assert facilitator.count("/settle") == 1  # the replay settled nothing

    async def inband() -> tuple[list[str], object]:
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=60, verify=TLS
        ) as client_http:
            async with streamable_http_client(url, http_client=client_http) as (read, write, _):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    names = [tool.name for tool in (await client.list_tools()).tools]
                    meta = {"x402/payment": payment_meta(unpaid.headers["PAYMENT-REQUIRED"])}
                    result = await client.call_tool("dir2mcp.find", {"content": "loader"}, meta=meta)
                    return names, result

    names, result = anyio.run(inband)
    assert "dir2mcp.search" in names
    assert result.isError is False
    assert result.meta["x402/payment-response"]["success"] is True
    assert facilitator.count("/settle") == 2
    assert up.stop() == 0, up.stderr

    events = [e["event"] for e in up.events()]
    assert {"payment_required", "payment_verified", "payment_settled"} <= set(events)
    state = tmp_path / ".dir2mcp"
    assert json.loads((state / "payments" / "pricing.snapshot.json").read_text())
    log_lines = (state / "payments" / "settlement.log").read_text().splitlines()
    assert log_lines and all("loader" not in line for line in log_lines)  # no query text
    with contextlib.closing(sqlite3.connect(state / "meta.sqlite")) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM payments_settlementlog")]
    assert statuses.count("settled") == 2 and "required" in statuses
    assert token not in up.stdout + up.stderr
