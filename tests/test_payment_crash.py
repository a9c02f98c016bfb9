"""Paid means answered: a real `up` SIGKILLed at each point of a paid call, then restarted.

For every crash point of payments/crashpoints.py, one `up --x402 required`
process (the signature-checking fake facilitator at the network edge) is
killed by the test-only hook ``DIR2MCP_TEST_CRASH_AT`` in the middle of a
paid ``tools/call``; the client sees its connection drop. A second `up` on
the same directory then gets the same payment again, as a client retries.
Whatever the point:

- the retry is answered (200, the search result, ``PAYMENT-RESPONSE`` with
  ``success``), and a replay gets the same stored answer;
- the facilitator settled the payment exactly once (even when it answers the
  retry "nonce already used": the killed process had settled it);
- the replay store and the audit show each step, in order, with the state the
  kill left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest
from x402.http import decode_payment_response_header, decode_payment_signature_header

from payments import crashpoints
from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import write_corpus
from tests.support import TLS
from tests.test_crash import finished
from tests.test_payments_e2e import ACCEPT, INIT, x402_flags
from tests.x402_client import payment_header

pytestmark = pytest.mark.slow

CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "dir2mcp.search", "arguments": {"query": "loader"}},
}
# Per crash point: the replay row the kill leaves (state, settle requests
# counted), the audit rows by then, the rows the retry adds, the /settle calls
# in all, and whether the retry's receipt is the reconciled one (no transaction).
AFTER = {
    "after_run": ("pending", 0, ["required", "verified"], ["verified", "settling", "settled"], 1, False),
    "before_settle": ("settling", 1, ["required", "verified", "settling"], ["settling", "settled"], 1, False),
    "after_settle": ("settling", 1, ["required", "verified", "settling"], ["settling", "settled"], 2, True),
    "after_store": ("done", 1, ["required", "verified", "settling", "settled"], [], 1, False),
}


@pytest.fixture
def facilitator():
    with running_facilitator() as fake:
        yield fake


def serving(running, root: Path, facilitator, **env: str):
    flags, x402_env = x402_flags(facilitator)
    up = running("--dir", str(root), "--json", *flags, env={**x402_env, **env})
    url = up.url()
    up.event("scan_progress", finished)  # the index is built: a search has hits
    return up, url


def session_headers(http: httpx.Client, url: str, root: Path) -> dict[str, str]:
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
    return {**auth, "MCP-Session-Id": http.post(url, json=INIT, headers=auth).headers["MCP-Session-Id"]}


def database(root: Path):
    return contextlib.closing(sqlite3.connect(f"file:{root / '.dir2mcp' / 'meta.sqlite'}?mode=ro", uri=True))


def replay_row(root: Path) -> tuple:
    with database(root) as conn:
        return conn.execute("SELECT state, settle_attempts FROM payments_paymentattempt").fetchall()


def audit(root: Path) -> list[str]:
    with database(root) as conn:
        return [row[0] for row in conn.execute("SELECT status FROM payments_settlementlog ORDER BY id")]


@pytest.mark.parametrize("point", crashpoints.POINTS)
def test_a_retry_after_a_crash_is_answered_once_and_settled_once(point, tmp_path, running, facilitator):
    state, counted, before, added, settle_calls, reconciled = AFTER[point]
    write_corpus(tmp_path)

    doomed, url = serving(running, tmp_path, facilitator, **{crashpoints.ENV: point})
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        headers = session_headers(http, url, tmp_path)
        unpaid = http.post(url, json=CALL, headers=headers)
        assert unpaid.status_code == 402
        signature = payment_header(unpaid.headers["PAYMENT-REQUIRED"])
        with pytest.raises(httpx.TransportError):  # the process died mid-call: no answer
            http.post(url, json=CALL, headers={**headers, "PAYMENT-SIGNATURE": signature})
    assert doomed.proc.wait(30) == -signal.SIGKILL
    assert replay_row(tmp_path) == [(state, counted)]
    assert audit(tmp_path) == before
    nonce = decode_payment_signature_header(signature).payload["authorization"]["nonce"].lower()
    settled_by_then = [nonce] if point in ("after_settle", "after_store") else []
    assert facilitator.settlements == settled_by_then

    restarted, url = serving(running, tmp_path, facilitator)
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        headers = session_headers(http, url, tmp_path)
        answer = http.post(url, json=CALL, headers={**headers, "PAYMENT-SIGNATURE": signature})
        replayed = http.post(url, json=CALL, headers={**headers, "PAYMENT-SIGNATURE": signature})
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["structuredContent"]["hits"] and not result.get("isError")
    receipt = decode_payment_response_header(answer.headers["PAYMENT-RESPONSE"])
    assert receipt.success is True
    if reconciled:  # the killed process's settlement: its transaction hash never came back
        assert receipt.transaction == "" and receipt.extra == {
            "reconciled": "invalid_exact_evm_nonce_already_used"
        }
    else:
        assert receipt.transaction == "0x" + hashlib.sha256(nonce.encode()).hexdigest()
    assert replayed.status_code == 200 and replayed.json()["result"] == result
    assert replayed.headers["PAYMENT-RESPONSE"] == answer.headers["PAYMENT-RESPONSE"]

    assert facilitator.settlements == [nonce]  # settled once, whatever the facilitator was asked
    assert facilitator.count("/settle") == settle_calls
    assert restarted.stop() == 0, restarted.stderr
    assert audit(tmp_path) == before + added
    assert [row[0] for row in replay_row(tmp_path)] == ["done"]
