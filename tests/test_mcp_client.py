"""``up`` under daphne on a real port, driven by the official MCP Python SDK.

The SDK's ClientSession validates every ``structuredContent`` against the
tool's ``outputSchema``, so schema drift fails here as it would for a user.
"""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import httpx
import pytest
from jsonschema import Draft202012Validator
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from mcp_gateway import contract
from tests.mcp_http import REPO, base_env, wait_for_index, write_corpus
from tests.support import TLS


def start_up(root, *extra: str, env: dict | None = None):
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "up", "--dir", str(root), "--json", *extra],
        cwd=REPO,
        env=base_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    events = []
    for line in proc.stdout:
        event = json.loads(line)
        events.append(event)
        if event["event"] == "connection":
            return proc, event["data"], events
    raise RuntimeError(f"up exited without a connection event: {proc.stderr.read()[-2000:]}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    write_corpus(root)
    proc, connection, events = start_up(root)
    token = (root / ".dir2mcp" / "secret.token").read_text().strip()
    yield root, connection["url"], token
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    assert token not in out + err
    assert "Traceback" not in err, err[-2000:]


def validate(name: str, schemas: dict, result) -> dict:
    assert result.isError is not True, result.content[0].text
    Draft202012Validator(schemas[name]).validate(result.structuredContent)
    assert result.content[0].type == "text" and result.content[0].text
    return result.structuredContent


async def session_walkthrough(url: str, token: str) -> None:
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=60, verify=TLS
    ) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, get_session_id):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                assert init.protocolVersion == "2025-11-25"
                assert init.serverInfo.name == "dir2mcp"
                assert init.capabilities.tools is not None and init.capabilities.logging is not None
                assert get_session_id().startswith("sess_")

                listed = await session.list_tools()
                live = [t.model_dump(exclude_none=True, by_alias=True) for t in listed.tools]
                committed = json.loads(contract.SNAPSHOT.read_text())["tools"]
                assert [t["name"] for t in live] == [t["name"] for t in committed]
                schemas = {t.name: t.outputSchema for t in listed.tools}

                await wait_for_index(session)
                search = validate(
                    "dir2mcp.search",
                    schemas,
                    await session.call_tool("dir2mcp.search", {"query": "parse_config_file"}),
                )
                top = search["hits"][0]
                assert top["rel_path"] == "src/loader.py"

                progress: list[float] = []

                async def on_progress(value, total, message):
                    progress.append(value)

                asked = validate(
                    "dir2mcp.ask",
                    schemas,
                    await session.call_tool(
                        "dir2mcp.ask",
                        {"question": "what reads configuration files?"},
                        progress_callback=on_progress,
                    ),
                )
                assert asked["citations"]
                assert progress and progress == sorted(set(progress))

                span = top["span"]
                opened = validate(
                    "dir2mcp.open_file",
                    schemas,
                    await session.call_tool(
                        "dir2mcp.open_file",
                        {
                            "rel_path": top["rel_path"],
                            "start_line": span["start_line"],
                            "end_line": span["end_line"],
                        },
                    ),
                )
                assert "def parse_config_file" in opened["content"]

                listed_files = validate(
                    "dir2mcp.list_files", schemas, await session.call_tool("dir2mcp.list_files", {})
                )
                assert {f["rel_path"] for f in listed_files["files"]} == {
                    "src/loader.py",
                    "docs/guide.md",
                    "notes.txt",
                }
                found = validate(
                    "dir2mcp.find",
                    schemas,
                    await session.call_tool("dir2mcp.find", {"content": "second line"}),
                )
                assert found["matches"][0]["rel_path"] == "notes.txt"
                stats = validate("dir2mcp.stats", schemas, await session.call_tool("dir2mcp.stats", {}))
                assert stats["indexing"]["indexed"] == 3

                refused = await session.call_tool("dir2mcp.open_file", {"rel_path": "../../etc/passwd"})
                assert refused.isError is True
                assert refused.structuredContent["error"]["code"] == "PATH_OUTSIDE_ROOT"

                await session.send_ping()
                await session.set_logging_level("warning")


def test_official_client_walks_every_tool(served):
    _, url, token = served
    anyio.run(session_walkthrough, url, token)


def test_the_client_closes_its_session_with_delete(served):
    _, url, token = served
    ids: list[str] = []

    async def open_and_close():
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=60, verify=TLS
        ) as http:
            async with streamable_http_client(url, http_client=http) as (read, write, get_session_id):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    ids.append(get_session_id())

    anyio.run(open_and_close)
    after = httpx.post(
        url,
        headers={
            "Authorization": f"Bearer {token}",
            "MCP-Session-Id": ids[0],
            "MCP-Protocol-Version": "2025-11-25",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
        verify=TLS,
    )
    assert after.status_code == 404


def test_an_oversized_body_is_refused_before_it_is_sent(served):
    """Under up, 413 comes from the declared length: the server does not wait
    for (or buffer) the 100 MB it announces."""
    import socket
    from urllib.parse import urlsplit

    _, url, token = served
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(
            (
                f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                "Content-Length: 100000000\r\n\r\n{"
            ).encode()
        )
        reply = sock.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413")
    assert '"INVALID_RANGE"' in reply
