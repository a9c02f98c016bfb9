"""Hostile round of 2026-11-29, session 21: every field and header as hostile,
against a real ``up`` (daphne, the gate, the connection bounds); see
docs/security.md, "Hostile round, 2026-11-29 (session 21)". Each test shows
a way in that was open before its fix.
"""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from corpus.security import KERNEL_FS_REASON, ExclusionEngine
from kernel import errors
from kernel.config import build_config
from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import ACCEPT, Server, base_env, write_corpus
from tests.support import TLS
from tests.test_hostile_patterns import CATASTROPHIC, Call, build, busy_worker
from tests.test_payments_e2e import INIT, x402_flags
from tests.up_process import Up

pytestmark = pytest.mark.slow


def started(root, **env: str) -> tuple[Up, Server]:
    up = Up("--dir", str(root), "--json", env=base_env(**env))
    url = up.url()
    up.event("scan_progress", lambda data: data.get("running") is False)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    return up, Server(root, url, token, up.proc)


def stopped(up: Up) -> None:
    code = up.stop()
    up.close()
    assert code == 0, up.stderr[-3000:]
    assert "Traceback" not in up.stderr, up.stderr[-3000:]


# -- the regex worker's turns ------------------------------------------------------


def test_one_client_never_takes_every_turn_at_the_regex_worker(tmp_path):
    """One client kept two catastrophic regex finds going at all times (each
    holding the worker for its whole budget, the next already waiting): the
    other client's regex find waited behind them and answered ``timed_out``.
    Now the turn goes to the client that waits, within a quarter of its budget."""
    root = tmp_path / "corpus"
    build(root)
    up, srv = started(root, DIR2MCP_FIND_BUDGET_SECONDS="8")
    try:
        hostile, other = srv.initialize(), srv.initialize()
        done = threading.Event()
        answers: list[dict] = []

        def hog() -> None:
            while not done.is_set():
                answers.append(srv.call(hostile, "dir2mcp.find", {"content": CATASTROPHIC, "regex": True}))

        hogs = [Call(hog) for _ in range(2)]
        busy_worker(srv, hogs[0])
        served = []
        for _ in range(2):
            found = srv.call(other, "dir2mcp.find", {"content": "hnsw", "regex": True})
            served.append(found["structuredContent"])
        done.set()
        for call in hogs:
            call.value()
    finally:
        stopped(up)

    for result in served:
        assert result.get("timed_out") is not True, served
        assert [m["rel_path"] for m in result["matches"]] == ["notes.txt"], served
    # the hostile client's calls gave way (or ran out their budget): never an error
    assert answers and all(a["structuredContent"].get("timed_out") for a in answers), answers


# -- x402 payment headers ----------------------------------------------------------


@pytest.fixture
def facilitator():
    with running_facilitator() as fake:
        yield fake


def test_a_payment_header_that_is_not_a_json_object_is_an_unreadable_payment(tmp_path, running, facilitator):
    """The x402 SDK's decoder called ``.get`` on whatever JSON the header held:
    ``[]``, ``"x"``, ``1``, ``null`` and JSON nested past the recursion limit
    were INTERNAL_ERROR (500) and a traceback each, on REST and MCP alike."""
    write_corpus(tmp_path)
    flags, env = x402_flags(facilitator)
    up = running("--dir", str(tmp_path), "--json", "--no-index", *flags, env=env)
    url = up.url()
    base = url.removesuffix("/mcp")
    token = (tmp_path / ".dir2mcp" / "secret.token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    hostile = [b"[]", b'"x"', b"1", b"null", b"[" * 3000 + b"]" * 3000]
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
    call["params"] = {"name": "dir2mcp.search", "arguments": {"query": "loader"}}
    answers = []
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        mcp = {**auth, "Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"}
        session = http.post(url, json=INIT, headers=mcp).headers["MCP-Session-Id"]
        for raw in hostile:
            signature = base64.b64encode(raw).decode()
            rest = http.post(
                f"{base}/api/v1/search",
                json={"query": "loader"},
                headers={**auth, "PAYMENT-SIGNATURE": signature},
            )
            answers.append((rest.status_code, rest.json()["error"]["message"]))
            headers = {**mcp, "MCP-Session-Id": session, "PAYMENT-SIGNATURE": signature}
            paid = http.post(url, json=call, headers=headers)
            answers.append((paid.status_code, paid.json()["error"]["message"]))
    code = up.stop()

    assert answers == [
        (402, "payment rejected: invalid_payload"),
        (402, "Payment rejected: invalid_payload"),
    ] * len(hostile), answers
    assert code == 0 and "Traceback" not in up.stderr, up.stderr[-3000:]


# -- who a client is -----------------------------------------------------------------


def test_one_ipv6_host_is_one_client_to_the_rate_limit_whatever_its_address(tmp_path, running):
    """Behind the documented proxy, each X-Real-IP was a client with a fresh
    budget: a host stepping through its IPv6 /64 was never refused."""
    write_corpus(tmp_path)
    env = {
        "DIR2MCP_SERVER__RATE_LIMIT_PER_MINUTE": "1",
        "DJANGO_BEHIND_PROXY": "1",
        "DJANGO_SECRET_KEY": "a-test-key-" + "x" * 50,
    }
    up = running("--dir", str(tmp_path), "--json", "--no-index", env=env)
    base = up.url().removesuffix("/mcp")
    token = (tmp_path / ".dir2mcp" / "secret.token").read_text().strip()
    with httpx.Client(timeout=60, trust_env=False, verify=TLS) as http:
        statuses = [
            http.get(
                f"{base}/api/v1/stats",
                headers={"Authorization": f"Bearer {token}", "X-Real-IP": f"2001:db8:5:6::{i + 1:x}"},
            ).status_code
            for i in range(12)
        ]
    # a burst of five (the bucket's floor), then 429 for the same /64
    assert statuses[:5] == [200] * 5 and 429 in statuses, statuses


# -- kernel file systems under the root ---------------------------------------------


def test_no_file_of_a_kernel_file_system_is_opened_even_under_the_root(tmp_path):
    """/proc's files pass as regular ones: a root that is, or holds, a proc
    mount served ``environ`` (a process's secrets) through open_file and
    read_bytes until session 21. A root below /proc needs no privilege to show it."""
    root = Path(f"/proc/{os.getpid()}")
    engine = ExclusionEngine.from_config(root, build_config({}, {}, {}), state_dir=tmp_path / "state")
    for rel in ("environ", "cmdline", "status"):
        with pytest.raises(errors.Dir2mcpError) as refused, engine.open(rel):
            pass
        assert refused.value.code == errors.FORBIDDEN, rel
        assert refused.value.message.startswith(KERNEL_FS_REASON + " (proc)"), rel


def test_a_proc_mount_inside_a_served_root_is_never_read(tmp_path, running):
    """The same through a real ``up`` whose root holds a proc mount (as a
    chroot or container tree does); needs the privilege to mount one."""
    write_corpus(tmp_path)
    procfs = tmp_path / "procfs"
    procfs.mkdir()
    if subprocess.run(["mount", "-t", "proc", "proc", str(procfs)], capture_output=True).returncode != 0:
        pytest.skip("mounting proc needs privileges this run does not have")
    try:
        up = running("--dir", str(tmp_path), "--json", "--no-index")
        srv = Server(
            tmp_path, up.url(), (tmp_path / ".dir2mcp" / "secret.token").read_text().strip(), up.proc
        )
        session = srv.initialize()
        answers = {
            tool: srv.call(session, tool, {"rel_path": f"procfs/{up.proc.pid}/environ"})
            for tool in ("dir2mcp.read_bytes", "dir2mcp.open_file", "dir2mcp.checksum")
        }
    finally:
        subprocess.run(["umount", "-l", str(procfs)], check=False)
    for tool, result in answers.items():
        assert result["structuredContent"].get("error", {}).get("code") == errors.FORBIDDEN, (tool, result)
