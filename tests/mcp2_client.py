"""The official MCP Python SDK 2.x client, run in its own venv (.venv-mcp2,
``make mcp2-env``: mcp 2.x needs httpx2 and mcp_types, beside the 1.x client
the other tests use). tests/test_mcp2_client.py runs it as a subprocess:

    python tests/mcp2_client.py MODE http URL TOKEN
    python tests/mcp2_client.py MODE stdio PYTHON MANAGE_PY ROOT

It lists the tools, searches, opens the first hit's file (2026-07-28 mirrors
its rel_path as Mcp-Param-Path) and reads it as a resource (2026-07-28: and opens a subscriptions/listen
for it), then prints one
JSON object with what it saw. It imports nothing of dir2mcp.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


async def walk(client: Client) -> dict:
    tools = (await client.list_tools()).tools
    found = await client.call_tool("dir2mcp.search", {"query": "parse config file", "k": 3})
    hit = found.structured_content["hits"][0]
    opened = await client.call_tool("dir2mcp.open_file", {"rel_path": hit["rel_path"]})
    uri = f"dir2mcp:///{hit['rel_path']}"
    read = await client.read_resource(uri)
    honored = None
    if client.protocol_version == "2026-07-28":  # subscriptions/listen: its acknowledgment
        async with client.listen(resources_list_changed=True, resource_subscriptions=[uri]) as sub:
            honored = sub.honored.model_dump(by_alias=True, exclude_none=True)
    return {
        "listen_honored": honored,
        "protocol_version": client.protocol_version,
        "tools": sorted(tool.name for tool in tools),
        "search_is_error": bool(found.is_error),
        "hit": hit["rel_path"],
        "open_file_is_error": bool(opened.is_error),
        "open_file_content": opened.structured_content.get("content", ""),
        "resource_text": read.contents[0].text,
    }


async def over_http(mode: str, url: str, token: str) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60.0, read=300.0)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            return await walk(client)


async def over_stdio(mode: str, python: str, manage: str, root: str) -> dict:
    params = StdioServerParameters(
        command=python, args=[manage, "mcp_stdio", "--dir", root, "--no-index"], env=dict(os.environ)
    )
    async with Client(params, mode=mode) as client:
        return await walk(client)


def main() -> None:
    mode, transport, *rest = sys.argv[1:]
    run = over_http if transport == "http" else over_stdio
    print(json.dumps(anyio.run(run, mode, *rest)))


if __name__ == "__main__":
    main()
