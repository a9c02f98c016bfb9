"""x402 in a stateless 2026-07-28 request (issue #33 item 3): `up --x402
required` under daphne, the fake facilitator at the network edge.

No session is ever opened here. A stateless tools/call of a priced tool is
challenged (HTTP 402, ``PAYMENT-REQUIRED``, JSON-RPC error 402 with the
request's id), answered and settled once paid (header or in-band ``_meta``),
and a payment sent again buys nothing more: the same request gets the stored
answer of its first request, any other request ``payment_already_used``,
with no tool run and no second settlement, whichever revision carried it
first (the replay store is the database, not a session). Over stdio, a
stateless call pays in-band.
"""

from __future__ import annotations

import json

import httpx
import pytest
from x402.http import decode_payment_required_header, decode_payment_response_header

from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import base_env, index, write_corpus
from tests.support import TLS
from tests.test_modern import META, VERSION, stdio_server  # noqa: F401 (a fixture)
from tests.test_payments_e2e import ACCEPT, INIT, x402_flags
from tests.up_process import Up
from tests.x402_client import payment_header, payment_meta, x402_env

pytestmark = pytest.mark.slow

SERVER_INFO = "io.modelcontextprotocol/serverInfo"


class Paid:
    """One `up --x402 required` and its fake facilitator, for the module."""

    def __init__(self, up: Up, facilitator, token: str):
        self.up, self.facilitator, self.token = up, facilitator, token
        self.url = up.url()

    def call(self, tool: str, arguments: dict, *, msg_id=1, signature: str = "", meta: dict | None = None):
        """A stateless tools/call: everything in the request, no session header."""
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": ACCEPT,
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        }
        if signature:
            headers["PAYMENT-SIGNATURE"] = signature
        params = {"name": tool, "arguments": arguments, "_meta": {**META, **(meta or {})}}
        body = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": params}
        return httpx.post(self.url, headers=headers, json=body, timeout=60, trust_env=False, verify=TLS)


@pytest.fixture(scope="module")
def paid(tmp_path_factory):
    root = tmp_path_factory.mktemp("paid")
    write_corpus(root)
    with running_facilitator() as facilitator:
        flags, env = x402_flags(facilitator)
        up = Up("--dir", str(root), "--json", *flags, env=env)
        try:
            up.event("scan_progress", lambda data: data.get("running") is False)
            token = (root / ".dir2mcp" / "secret.token").read_text().strip()
            yield Paid(up, facilitator, token)
            assert up.stop() == 0, up.stderr
            assert "Traceback" not in up.stderr, up.stderr
        finally:
            up.close()


def challenge(paid: Paid, query: str) -> str:
    unpaid = paid.call("dir2mcp.search", {"query": query})
    assert unpaid.status_code == 402, unpaid.text
    return unpaid.headers["PAYMENT-REQUIRED"]


def test_an_unpaid_stateless_call_is_challenged_and_runs_nothing(paid):
    verified = paid.facilitator.count("/verify")
    unpaid = paid.call("dir2mcp.search", {"query": "loader"}, msg_id="u1")
    assert unpaid.status_code == 402, unpaid.text
    assert "MCP-Session-Id" not in unpaid.headers
    required = decode_payment_required_header(unpaid.headers["PAYMENT-REQUIRED"])
    assert required.accepts[0].amount == "10000"
    body = unpaid.json()
    assert body["id"] == "u1"
    assert body["error"]["code"] == 402 and body["error"]["data"]["accepts"]
    assert "result" not in body
    assert paid.facilitator.count("/verify") == verified  # nothing was asked, nothing ran


def test_a_paid_stateless_call_is_answered_settled_and_never_bought_twice(paid):
    settled = paid.facilitator.count("/settle")
    signature = payment_header(challenge(paid, "loader"))
    answer = paid.call("dir2mcp.search", {"query": "loader"}, msg_id=2, signature=signature)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["resultType"] == "complete" and result["_meta"][SERVER_INFO]["name"] == "dir2mcp"
    assert result["structuredContent"]["hits"] and not result.get("isError")
    receipt = decode_payment_response_header(answer.headers["PAYMENT-RESPONSE"])
    assert receipt.success is True and receipt.transaction
    assert paid.facilitator.count("/settle") == settled + 1

    # The same request again (a client whose answer was lost): the stored
    # answer, with nothing verified or settled again.
    verified = paid.facilitator.count("/verify")
    again = paid.call("dir2mcp.search", {"query": "loader"}, msg_id=3, signature=signature)
    assert again.status_code == 200, again.text
    assert again.json()["result"]["structuredContent"] == result["structuredContent"]
    again_receipt = decode_payment_response_header(again.headers["PAYMENT-RESPONSE"])
    assert again_receipt.transaction == receipt.transaction

    # The same payment for another query (anyone can rebuild it from the
    # chain): it bought one answer, and this is not its request. No run of
    # the new query, nothing verified or settled, nothing of the stored answer.
    other = paid.call("dir2mcp.search", {"query": "something else entirely"}, msg_id=4, signature=signature)
    used_up(other, result, msg_id=4)
    assert (paid.facilitator.count("/verify"), paid.facilitator.count("/settle")) == (verified, settled + 1)


def used_up(answer: httpx.Response, stored: dict, *, msg_id: object) -> None:
    """402 with a fresh challenge naming ``payment_already_used``, holding nothing of ``stored``."""
    assert answer.status_code == 402, answer.text
    required = decode_payment_required_header(answer.headers["PAYMENT-REQUIRED"])
    assert required.error == "payment_already_used" and required.accepts[0].amount == "10000"
    body = answer.json()
    assert body["id"] == msg_id and "result" not in body
    assert body["error"]["code"] == 402 and body["error"]["data"]["error"] == "payment_already_used"
    assert "PAYMENT-RESPONSE" not in answer.headers
    holds_nothing_of(stored, answer.text)


def test_the_in_band_payment_works_statelessly_and_is_not_replayable(paid):
    settled = paid.facilitator.count("/settle")
    payment = {"x402/payment": payment_meta(challenge(paid, "config"))}
    answer = paid.call("dir2mcp.search", {"query": "config"}, meta=payment)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert not result.get("isError") and result["structuredContent"]["hits"]
    assert result["_meta"]["x402/payment-response"]["success"] is True
    assert result["resultType"] == "complete" and SERVER_INFO in result["_meta"]
    assert paid.facilitator.count("/settle") == settled + 1

    again = paid.call("dir2mcp.search", {"query": "config"}, meta=payment, msg_id=7)
    assert again.json()["id"] == 7
    assert again.json()["result"]["structuredContent"] == result["structuredContent"]
    assert paid.facilitator.count("/settle") == settled + 1

    # another request with the payment: refused in band, as any payment failure is
    other = paid.call("dir2mcp.search", {"query": "parse"}, meta=payment, msg_id=8)
    used_in_band(other, result, msg_id=8)
    assert paid.facilitator.count("/settle") == settled + 1


def holds_nothing_of(stored: dict, text: str) -> None:
    """Not one of the stored answer's hits is in ``text``."""
    hits = stored["structuredContent"]["hits"]
    assert hits and '"hits"' not in text
    assert not [hit["rel_path"] for hit in hits if hit["rel_path"] in text]


def used_in_band(answer: httpx.Response, stored: dict, *, msg_id: object) -> None:
    """An ``isError`` result whose PaymentRequired names ``payment_already_used``."""
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == msg_id
    refused = body["result"]
    assert refused["isError"] is True and "x402/payment-response" not in refused.get("_meta", {})
    assert refused["structuredContent"]["error"] == "payment_already_used"
    assert refused["structuredContent"]["accepts"][0]["amount"] == "10000"
    holds_nothing_of(stored, answer.text)


def test_an_unreadable_in_band_payment_is_challenged_in_band(paid):
    answer = paid.call("dir2mcp.search", {"query": "loader"}, meta={"x402/payment": {"x402Version": 2}})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True
    required = result["structuredContent"]
    assert required["error"] == "invalid_payload" and required["accepts"]
    assert result["resultType"] == "complete"


def test_a_payment_spent_in_a_session_buys_nothing_statelessly(paid):
    """One replay store for both revisions: a payment whose call a session
    made is not spent again by a stateless request (nor the reverse). Its
    own request, retried statelessly, gets the stored answer; any other is
    refused, in a session as without one."""
    auth = {"Authorization": f"Bearer {paid.token}", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        session = http.post(paid.url, json=INIT, headers=auth).headers["MCP-Session-Id"]
        headers = {**auth, "MCP-Session-Id": session}
        unpaid = http.post(paid.url, json=call, headers=headers)
        signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
        in_session = http.post(paid.url, json=call, headers={**headers, "PAYMENT-SIGNATURE": signature})
        assert in_session.status_code == 200, in_session.text
        settled = paid.facilitator.count("/settle")
        stored = in_session.json()["result"]
        # another session (another client holding the token) replays it for its own query
        other_session = http.post(paid.url, json=INIT, headers=auth).headers["MCP-Session-Id"]
        other_call = {**call, "id": 5, "params": {**call["params"], "arguments": {"query": "secret plans"}}}
        other_headers = {**auth, "MCP-Session-Id": other_session, "PAYMENT-SIGNATURE": signature}
        used_up(http.post(paid.url, json=other_call, headers=other_headers), stored, msg_id=5)

    stateless = paid.call("dir2mcp.search", {"query": "other words"}, msg_id=6, signature=signature)
    used_up(stateless, stored, msg_id=6)
    same = paid.call("dir2mcp.search", {"query": "loader"}, signature=signature)
    assert same.status_code == 200, same.text
    assert same.json()["result"]["structuredContent"] == stored["structuredContent"]
    assert paid.facilitator.count("/settle") == settled


def test_a_stateless_call_over_stdio_pays_in_band(tmp_path, stdio_server):  # noqa: F811
    """stdio has no headers: the challenge is the JSON-RPC error's data, the
    payment goes in ``_meta`` beside the revision's fields."""
    root = tmp_path / "corpus"
    root.mkdir()
    write_corpus(root)
    index(root, base_env(DIR2MCP_ROOT=str(root)))
    with running_facilitator() as facilitator:
        server = stdio_server(root, "--no-index", env=x402_env(facilitator.url))
        call = {"name": "dir2mcp.search", "arguments": {"query": "loader"}, "_meta": META}
        unpaid = server.request(1, "tools/call", call)
        assert unpaid["error"]["code"] == 402 and unpaid["error"]["data"]["accepts"]
        required = {k: v for k, v in unpaid["error"]["data"].items() if k not in ("code", "retryable")}
        payment = {**META, "x402/payment": payment_meta(required)}
        paid = server.request(2, "tools/call", {**call, "_meta": payment})["result"]
        assert not paid.get("isError") and paid["structuredContent"]["hits"]
        assert paid["_meta"]["x402/payment-response"]["success"] is True
        assert paid["resultType"] == "complete"
        again = server.request(3, "tools/call", {**call, "_meta": payment})["result"]
        assert again["structuredContent"] == paid["structuredContent"]
        other = {**call, "arguments": {"query": "parse"}, "_meta": payment}
        refused = server.request(4, "tools/call", other)["result"]  # another request: in band, refused
        assert refused["isError"] is True and refused["structuredContent"]["error"] == "payment_already_used"
        holds_nothing_of(paid, json.dumps(refused))
        assert facilitator.count("/settle") == 1
        assert server.close() == 0
