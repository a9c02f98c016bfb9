"""Hostile round of 2026-11-30, session 27: ``mcp_stdio``, the REST mirror,
resources and prompts as a hostile client (or a hostile file in the tree)
uses them; see docs/security.md, "Hostile round, 2026-11-30 (session 27)".
Each test shows a way in that was open before its fix, on a real
``mcp_stdio`` process or a real ``up``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from kernel import errors
from tests.fakes.facilitator import running_facilitator
from tests.mcp_http import Server, write_corpus
from tests.support import wait_until
from tests.test_cli import cli
from tests.test_hostile_clients import stateless, token_of
from tests.test_hostile_session26 import unreachable_redis  # noqa: F401 (a fixture)
from tests.test_stdio import Raw, command, raw_server  # noqa: F401 (a fixture)
from tests.x402_client import BASE_SEPOLIA, PAY_TO

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


def without_redis(tmp_path: Path, start: Callable[..., Raw], redis_url: str) -> Raw:
    """``mcp_stdio --no-index`` on an indexed corpus with ``REDIS_URL`` at a
    Redis that never answers, initialized."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    server = start(root, "--no-index", env={"REDIS_URL": redis_url})
    server.initialize()
    return server


def test_stdio_never_waits_for_the_fan_out_group_on_its_reader(tmp_path, raw_server, unreachable_redis):  # noqa: F811
    """With Redis configured and away, stdio's ``resources/subscribe`` and
    ``subscriptions/listen`` waited up to 5 s for the fan-out group on the
    reader thread (``HUB.ready``), which read nothing else meanwhile: a
    ``ping`` written after them was answered after them. Both are now
    calls (on a worker, cancellable, under ``server.call_timeout``), as
    ``up`` admits a listen as its client's call; the ``ping`` comes first."""
    server = without_redis(tmp_path, raw_server, unreachable_redis)
    note = "dir2mcp:///notes.txt"
    server.send({"jsonrpc": "2.0", "id": "sub", "method": "resources/subscribe", "params": {"uri": note}})
    body, _headers = stateless("subscriptions/listen", {"notifications": {"resourceSubscriptions": [note]}})
    server.send(body | {"id": "listen"})
    server.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
    before_ping = []  # what came before the ping's answer
    while (message := server.recv(timeout=WAIT)).get("id") != "ping":
        before_ping.append(message.get("id", message.get("method")))
    assert before_ping == [], before_ping  # before: the subscription's answer and the acknowledgment
    seen = []
    while len(seen) < 2:
        message = server.recv(timeout=WAIT)
        seen.append(message.get("id", message.get("method")))
    assert sorted(seen) == ["notifications/subscriptions/acknowledged", "sub"], seen
    server.notify("notifications/cancelled", {"requestId": "listen"})
    assert server.request("ping-2", "ping")["result"] == {}
    assert server.close() == 0
    assert "Traceback" not in server.stderr, server.stderr


def test_stdio_keeps_a_subscribe_and_its_unsubscribe_in_order(tmp_path, raw_server, unreachable_redis):  # noqa: F811
    """Found by session 27's review: once ``resources/subscribe`` ran on a
    worker (waiting for the fan-out group) and ``unsubscribe`` still on the
    reader, a client writing both without waiting had the unsubscribe
    answered first and stayed subscribed. Both go through one lane now."""
    server = without_redis(tmp_path, raw_server, unreachable_redis)
    note = "dir2mcp:///notes.txt"
    server.send({"jsonrpc": "2.0", "id": "sub", "method": "resources/subscribe", "params": {"uri": note}})
    server.send({"jsonrpc": "2.0", "id": "unsub", "method": "resources/unsubscribe", "params": {"uri": note}})
    server.send({"jsonrpc": "2.0", "id": "ping", "method": "ping"})
    order = []
    while len(order) < 3:
        order.append(server.recv(timeout=WAIT).get("id"))
    assert order == ["ping", "sub", "unsub"], order  # before: unsub (on the reader) first
    assert server.close() == 0
    assert "Traceback" not in server.stderr, server.stderr


# -- x402: what a priced tool sells, handed out free by other methods ------------------------


@pytest.fixture(scope="module")
def facilitator():
    with running_facilitator() as fake:
        yield fake


def gated_env(facilitator, prices: str) -> dict[str, str]:
    """x402 required, every tool at the default price but those ``prices`` names."""
    return {
        "DIR2MCP_X402_MODE": "required",
        "DIR2MCP_X402_FACILITATOR_URL": facilitator.url,
        "DIR2MCP_X402_RESOURCE_BASE_URL": "https://files.example",
        "DIR2MCP_X402_NETWORK": BASE_SEPOLIA,
        "DIR2MCP_X402_PRICE": "0.01",
        "DIR2MCP_X402_PAY_TO": PAY_TO,
        "DIR2MCP_X402__ROUTE_POLICY__TOOLS_CALL__PRICES": prices,
    }


def rpc(srv: Server, method: str, params: dict) -> dict:
    """A stateless (2026-07-28) request with the server's token; its answer."""
    body, headers = stateless(method, params)
    named = params.get("uri", params.get("name"))
    if method in ("resources/read", "prompts/get") and isinstance(named, str):
        headers["Mcp-Name"] = named  # ASCII here: no encoding needed
    auth = {"Authorization": f"Bearer {srv.token}"}
    return httpx.post(srv.url, headers=headers | auth, json=body, timeout=WAIT).json()


TEXT = "hnsw index notes"  # notes.txt's first line (tests/mcp_http.py: write_corpus)
SOLD = [  # (method, params): each hands out what a priced tool sells
    ("resources/read", {"uri": "dir2mcp:///notes.txt"}),
    ("resources/read", {"uri": "dir2mcp:///notes.txt?lines=1-1"}),
    ("resources/list", {}),
    ("prompts/get", {"name": "explain", "arguments": {"path": "notes.txt"}}),
    ("prompts/get", {"name": "changes", "arguments": {"since": "1970-01-01"}}),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": "path", "value": "no"}},
    ),
    (
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "dir2mcp:///{+path}"},
            "argument": {"name": "path", "value": "no"},
        },
    ),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": "symbol", "value": "parse_"}},
    ),
]


def test_nothing_a_priced_tool_sells_is_handed_out_free_by_another_method(tmp_path, running, facilitator):
    """With x402 on, ``resources/read`` and ``resources/list`` were refused
    while ``open_file`` and ``list_files`` are priced, but the same names
    went out free by two other methods that are no tool: the ``changes``
    prompt (since 1970: every file, newest first, with its time, 50 of them
    and the total) and ``completion/complete`` (file names for a path or a
    resource template, defined names for a symbol), over a session,
    stateless and stdio alike. A client holding the token listed the
    directory without paying. Each is now refused (-32600, ``FORBIDDEN``)
    while the tool selling what it hands out is priced."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    up = running("--dir", str(root), "--json", "--no-index", env=gated_env(facilitator, "{}"))
    srv = Server(root, up.url(), token_of(root), up.proc)
    session = srv.initialize()
    opened = {"name": "dir2mcp.open_file", "arguments": {"rel_path": "notes.txt"}}
    unpaid = srv.post(
        {"jsonrpc": "2.0", "id": "tool", "method": "tools/call", "params": opened}, session=session
    )
    assert unpaid.status_code == 402 and TEXT not in unpaid.text  # the tool is sold: a challenge

    handed_out = []  # (surface, method, what it answered) for each that was not refused
    for n, (method, params) in enumerate(SOLD):
        answer = srv.post({"jsonrpc": "2.0", "id": n, "method": method, "params": params}, session=session)
        for surface, sent in (("session", answer.json()), ("stateless", rpc(srv, method, params))):
            text = json.dumps(sent)
            leaked = TEXT in text or "notes.txt" in text.replace("dir2mcp:///notes.txt", "")
            refused = (sent.get("error") or {}).get("data", {}).get("code") == errors.FORBIDDEN
            if leaked or not refused:
                handed_out.append((surface, method, text[:300]))
    auth = {"Authorization": f"Bearer {srv.token}"}
    for path, params in [
        ("/api/v1/resources/read", {"uri": "dir2mcp:///notes.txt"}),
        ("/api/v1/resources", {}),
    ]:
        rest = httpx.get(srv.base + path, params=params, headers=auth, timeout=WAIT)
        if rest.status_code != 403 or TEXT in rest.text or "notes.txt" in rest.text:
            handed_out.append(("rest", path, rest.text[:300]))
    # stdio answers through the same dispatch
    stdio = Raw(command(root, "--no-index"), env=gated_env(facilitator, "{}"))
    try:
        stdio.initialize()
        for n, (method, params) in enumerate(SOLD):
            sent = stdio.request(f"stdio-{n}", method, params)
            if (sent.get("error") or {}).get("data", {}).get("code") != errors.FORBIDDEN:
                handed_out.append(("stdio", method, json.dumps(sent)[:300]))
        assert stdio.close() == 0
    finally:
        stdio.kill()
    # before: the changes prompt and the three completions, on every surface
    assert not handed_out, "\n".join(map(str, handed_out))
    assert "Traceback" not in up.stderr, up.stderr


def test_methods_stay_free_while_the_tools_selling_the_same_are_free(tmp_path, running, facilitator):
    """The refusal follows the prices: with the tools behind them free, the
    same methods answer as without x402 (a resource, a prompt, a completion)."""
    root = tmp_path / "corpus"
    write_corpus(root)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    tools = ("open_file", "read_bytes", "list_files", "search", "symbols")
    free = "{" + ", ".join(f'dir2mcp.{tool}: "0"' for tool in tools) + "}"
    up = running("--dir", str(root), "--json", "--no-index", env=gated_env(facilitator, free))
    srv = Server(root, up.url(), token_of(root), up.proc)
    for method, params in SOLD:
        answer = rpc(srv, method, params)
        assert "result" in answer, (method, answer)
    read = rpc(srv, "resources/read", {"uri": "dir2mcp:///notes.txt"})
    assert TEXT in read["result"]["contents"][0]["text"]
    stats = rpc(srv, "tools/call", {"name": "dir2mcp.stats", "arguments": {}})
    assert "result" not in stats  # stats keeps the default price: still sold


def test_a_binary_file_is_not_handed_out_free_while_read_bytes_is_sold(tmp_path, running, facilitator):
    """``resources/read`` was refused only while ``open_file`` is priced: with
    ``open_file`` free and ``read_bytes`` sold, a whole read of a binary file
    (an image, a key store, any file that is no text) answered its bytes,
    base64, free: what ``read_bytes`` sells. Such a read is now refused
    (-32600 ``FORBIDDEN``, REST 403) while ``read_bytes`` is priced; text
    is still served, as ``open_file`` serves it free."""
    root = tmp_path / "corpus"
    write_corpus(root)
    (root / "blob.bin").write_bytes(bytes(range(256)) * 8)
    indexed = cli("reindex", "--dir", str(root), "--quiet")
    assert indexed.returncode == 0, indexed.stderr
    free = '{dir2mcp.open_file: "0", dir2mcp.list_files: "0"}'  # read_bytes keeps the default price
    up = running("--dir", str(root), "--json", "--no-index", env=gated_env(facilitator, free))
    srv = Server(root, up.url(), token_of(root), up.proc)
    text = rpc(srv, "resources/read", {"uri": "dir2mcp:///notes.txt"})
    assert TEXT in text["result"]["contents"][0]["text"], text
    blob = rpc(srv, "resources/read", {"uri": "dir2mcp:///blob.bin"})
    assert "result" not in blob, str(blob)[:300]  # before: the bytes, base64
    assert blob["error"]["data"]["code"] == errors.FORBIDDEN, blob
    auth = {"Authorization": f"Bearer {srv.token}"}
    params = {"uri": "dir2mcp:///blob.bin"}
    rest = httpx.get(srv.base + "/api/v1/resources/read", params=params, headers=auth, timeout=WAIT)
    assert rest.status_code == 403 and rest.json()["error"]["code"] == errors.FORBIDDEN, rest.text[:300]
    assert "Traceback" not in up.stderr, up.stderr
