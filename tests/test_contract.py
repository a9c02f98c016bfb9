"""The committed tool contract matches what tools/list serves."""

from __future__ import annotations

import json

from mcp_gateway import contract, dispatch, schemas, tools
from mcp_gateway.transport import shape_message


def live_tools() -> list[dict]:
    listed, cursor = [], None
    while True:
        params = {"cursor": cursor} if cursor else {}
        msg = shape_message({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})
        result = dispatch.respond(msg, dispatch.SessionState("s", "2025-11-25"), ctx=None)["result"]
        listed += result["tools"]
        cursor = result.get("nextCursor")
        if not cursor:
            return listed


def test_tools_list_matches_the_committed_snapshot():
    committed = json.loads(contract.SNAPSHOT.read_text(encoding="utf-8"))
    live = {"schemaVersion": schemas.SCHEMA_VERSION, "tools": live_tools()}
    assert json.loads(json.dumps(live)) == committed, (
        "tools/list differs from docs/contracts/tools.json: bump SCHEMA_VERSION in mcp_gateway/schemas.py "
        "by the rules in docs/contracts.md, then run `make contract`"
    )


def test_the_snapshot_is_rendered_canonically():
    assert contract.SNAPSHOT.read_text(encoding="utf-8") == contract.render()


def test_core_tools_keep_the_spec_schemas():
    core = {"dir2mcp.search", "dir2mcp.ask", "dir2mcp.open_file", "dir2mcp.list_files", "dir2mcp.stats"}
    assert core <= set(tools.table())
    search = tools.table()["dir2mcp.search"]
    assert search.input_schema["required"] == ["query"]
    assert search.output_schema["required"] == ["query", "hits", "indexing_complete"]
    assert set(search.output_schema["$defs"]) == {"Span", "Hit"}
