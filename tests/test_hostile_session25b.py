"""Hostile round of 2026-11-30, session 25b: payments, stdio and the admin;
see docs/security.md, "Hostile round, 2026-11-30 (session 25)", "Payments,
stdio and the admin". Each test shows a way in that was open before its fix.
"""

from __future__ import annotations

import base64
import json
import subprocess

import pytest

from kernel import errors
from tests.mcp_http import REPO, base_env, write_corpus
from tests.test_cli import cli
from tests.test_payments_gate import Tool, call, challenge, fake_facilitator, gate
from tests.test_stdio import INITIALIZE, check_jsonrpc_line, command
from tests.x402_client import payment_header

pytestmark = pytest.mark.slow
__all__ = ["fake_facilitator", "gate"]  # the fixtures: a fake x402 facilitator and a gate paying to it

#: calls accepted and unanswered at a time (``server.max_concurrent_calls``), kept small here
LIMIT = 8
#: more calls than the limit and stdio's four workers together can hold
CALLS = 3 * LIMIT
#: one answer larger than a pipe's buffer (64 KiB on Linux), so it blocks until read
BIG = 200_000


def test_stdio_calls_written_without_reading_answers_are_bounded(tmp_path):
    """stdio queued every ``tools/call`` it read, without bound: a client
    writing calls and reading no answer (its pipe full, the workers blocked
    on writing) grew the server's queue for as long as it wrote. Calls
    accepted and unanswered are now at most ``server.max_concurrent_calls``;
    one more is ``SERVER_BUSY`` (-32001, retryable) at once, as on HTTP.
    Before the fix every call here was queued and answered."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / "big.txt").write_text("x" * BIG + "\n")
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    env = base_env(DIR2MCP_SERVER__MAX_CONCURRENT_CALLS=str(LIMIT))
    proc = subprocess.Popen(
        command(root, "--no-index"),
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
        proc.stdin.flush()
        assert "result" in check_jsonrpc_line(proc.stdout.readline())
        lines = [json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})]
        for n in range(CALLS):
            arguments = {"rel_path": "big.txt", "length": BIG, "format": "text"}
            call = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "dir2mcp.read_bytes", "arguments": arguments},
            }
            lines.append(json.dumps(call))
        # A few KB: the pipe takes them all while nothing reads the answers.
        proc.stdin.write("\n".join(lines).encode() + b"\n")
        proc.stdin.flush()
        answers: dict[int, dict] = {}
        while len(answers) < CALLS:
            msg = check_jsonrpc_line(proc.stdout.readline())
            if "id" in msg:
                assert msg["id"] not in answers, msg
                answers[msg["id"]] = msg
        busy = [a for a in answers.values() if "error" in a]
        served = [a for a in answers.values() if "result" in a]
        assert busy, "every call was queued"
        for refused in busy:
            assert refused["error"]["code"] == errors.RPC_SERVER_BUSY, refused
            assert refused["error"]["data"] == {"code": errors.SERVER_BUSY, "retryable": True}, refused
        assert served and all(not a["result"].get("isError") for a in served), served[:1]
        # Once its answers are read, the server takes calls again.
        proc.stdin.write(lines[1].encode() + b"\n")
        proc.stdin.flush()
        assert "result" in check_jsonrpc_line(proc.stdout.readline())
    finally:
        proc.stdin.close()
        proc.wait(60)
        proc.stdout.close()


# -- x402: one payment, one run ----------------------------------------------------------


def respelled(header: str) -> str:
    """The same payment, its signature's hex without ``0x``: the same bytes to the facilitator."""
    payment = json.loads(base64.b64decode(header))
    payment["payload"]["signature"] = payment["payload"]["signature"].removeprefix("0x")
    return base64.b64encode(json.dumps(payment).encode()).decode()


@pytest.mark.django_db
def test_a_respelled_payment_is_the_same_payment_and_never_runs_the_tool_twice(gate, fake_facilitator):
    """The replay store knew a payment by its signature and nonce as sent,
    lower-cased only: the same signature without its ``0x`` was a new
    payment, verified again (the nonce is unused until the first settles),
    and ran the tool a second time; only one of the two settled, so one
    result was served for one payment, but the work was done twice. Sent
    while the first is running it is now "in progress", and after it the
    stored answer."""
    header = payment_header(challenge(gate))
    tool = Tool()
    during: list[object] = []

    def run_and_resend() -> dict[str, object]:
        during.append(call(gate, tool, header=respelled(header)))  # arrives while the first runs
        return tool()

    first = call(gate, run_and_resend, header=header)  # the same request as the respelled copy's
    assert first.kind == "paid", first
    assert [o.kind for o in during] == ["in_progress"], during  # before: "paid", the tool run again
    after = call(gate, tool, header=respelled(header))
    assert after.kind == "replayed" and after.result == first.result, after
    assert (
        tool.calls == 1 and fake_facilitator.count("/verify") == 1 and fake_facilitator.count("/settle") == 1
    )
