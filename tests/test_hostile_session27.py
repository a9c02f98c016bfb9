"""Hostile round of 2026-11-30, session 27: ``mcp_stdio``, the REST mirror,
resources and prompts as a hostile client (or a hostile file in the tree)
uses them; see docs/security.md, "Hostile round, 2026-11-30 (session 27)".
Each test shows a way in that was open before its fix, on a real
``mcp_stdio`` process or a real ``up``.
"""

from __future__ import annotations

import pytest

from kernel import errors
from tests.mcp_http import write_corpus
from tests.support import wait_until
from tests.test_stdio import Raw, raw_server  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

FAR = 10**9  # a line far past the end of any file
WAIT = 60.0  # a reply's bound: only a stuck reader reaches it


def huge_log(root) -> None:
    """A 1 TiB sparse text file: its writer spends a few bytes of disk, a
    reader looking for line ``FAR`` reads a quarter of an hour of zeros."""
    with open(root / "huge.log", "wb") as log:
        log.write(b"a line of the log\n" * 1000)  # the head the classifier sniffs is text
        log.truncate(2**40)


def reply_to(server: Raw, msg_id: str) -> dict:
    """The next response (notifications passed over); it must answer ``msg_id``."""
    reply = server.recv(timeout=WAIT)
    while "method" in reply:
        reply = server.recv(timeout=WAIT)
    assert reply["id"] == msg_id, reply
    return reply


def overdue(reply: dict) -> bool:
    error = reply.get("error") or {}
    return error.get("code") == errors.RPC_SERVER_BUSY and error["data"]["code"] == errors.DEADLINE_EXCEEDED


# -- stdio: reads on the reader thread, calls without a deadline --------------------------


def test_stdio_never_reads_a_file_on_its_reader_and_keeps_every_calls_deadline(tmp_path, raw_server):  # noqa: F811
    """``mcp_stdio`` answered ``resources/read``, ``prompts/get`` and
    ``completion/complete`` on its one reader thread, with no stop event and
    no deadline, while ``up`` runs each as a call (a slot, a stop event, and
    ``server.call_timeout``). A slice URI far into a large file (a 1 TiB
    sparse one here, which a local writer plants for a few bytes of disk)
    held the reader for a quarter of an hour: no ``ping`` was answered, no
    ``notifications/cancelled`` read (the client could not stop it), no end
    of input noticed. And no stdio call had a deadline: ``open_file`` of the
    same line ran past ``server.call_timeout`` for as long. Each of the four
    is now a call on stdio too: on a worker, cancellable, answered
    ``DEADLINE_EXCEEDED`` at ``server.call_timeout`` with its stop event set."""
    root = tmp_path / "corpus"
    write_corpus(root)
    huge_log(root)
    env = {"DIR2MCP_SERVER__CALL_TIMEOUT": "2s"}
    server = raw_server(root, "--no-index", env=env)
    server.initialize()

    far = f"dir2mcp:///huge.log?lines={FAR}-{FAR}"
    server.send({"jsonrpc": "2.0", "id": "far-read", "method": "resources/read", "params": {"uri": far}})
    server.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
    assert reply_to(server, "ping")["result"] == {}  # before: no answer, the reader was reading
    assert overdue(reply_to(server, "far-read"))

    opened = {"name": "dir2mcp.open_file", "arguments": {"rel_path": "huge.log", "start_line": FAR}}
    server.send({"jsonrpc": "2.0", "id": "far-call", "method": "tools/call", "params": opened})
    assert overdue(reply_to(server, "far-call"))  # before: no deadline at all

    # A read the client cancels stops, and its worker takes calls again.
    server.send({"jsonrpc": "2.0", "id": "cancelled", "method": "resources/read", "params": {"uri": far}})
    server.notify("notifications/cancelled", {"requestId": "cancelled"})
    assert server.request("ping-2", "ping")["result"] == {}
    asked = iter(range(1000))

    def stats_answered() -> bool:
        stats = server.request(
            f"stats-{next(asked)}", "tools/call", {"name": "dir2mcp.stats", "arguments": {}}
        )
        return "result" in stats

    wait_until(stats_answered, timeout=WAIT, message="a call answered after the cancelled read")
    assert server.close() == 0
    assert all(b'"id":"cancelled"' not in line for line in server.lines)  # a cancelled call gets no answer
    assert "Traceback" not in server.stderr, server.stderr
