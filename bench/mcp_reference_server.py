"""The reference for bench/mcp_http.py: the official MCP Python SDK serving our search.

    python bench/mcp_reference_server.py --dir ROOT --state-dir STATE --port PORT [--sdk-validation]

The SDK's low-level ``Server`` with a ``list_tools`` handler (our
``dir2mcp.search`` definition) and a ``call_tool`` handler, behind the SDK's
``StreamableHTTPSessionManager`` (stateful sessions, JSON responses) mounted
in a Starlette app under uvicorn, one process, loopback only. The handler
runs the same ``tools.run`` our endpoint runs (input validation with the
cached validator, defaults, ``Searcher.search``, the summary) in a worker
thread, as our endpoint does with ``sync_to_async``, against the same state
directory, configured by the same ``DIR2MCP_*`` environment.

By default the SDK's own per-call input validation is off: it calls
``jsonschema.validate``, which re-checks the schema against its metaschema
and rebuilds the validator on every call (about 5 ms here), while
``tools.run`` validates the same schema anyway. ``--sdk-validation`` turns it
back on, to see the SDK's out-of-the-box figure.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from search import setup_django  # noqa: E402


def make_app(sdk_validation: bool):
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    from corpus.store import open_store
    from mcp_gateway import context, current, tools

    ctx = context.build(auth_spec="none")
    open_store(ctx.state)
    current.install(ctx)
    tool = tools.table()["dir2mcp.search"]
    definition = types.Tool.model_validate(tool.definition())

    server = Server("dir2mcp-reference")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [definition]

    @server.call_tool(validate_input=sdk_validation)
    async def call_tool(name: str, arguments: dict) -> types.CallToolResult:
        if name != tool.name:
            raise ValueError(f"unknown tool {name}")
        result = await anyio.to_thread.run_sync(
            functools.partial(tools.run, tool, arguments, tools.Call(ctx))
        )
        return types.CallToolResult.model_validate(result)

    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=False)

    class Endpoint:  # an ASGI app, not a function: Starlette then passes scope/receive/send through
        async def __call__(self, scope, receive, send) -> None:
            await manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        async with manager.run():
            yield

    return Starlette(routes=[Route("/mcp", endpoint=Endpoint())], lifespan=lifespan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sdk-validation", action="store_true")
    args = parser.parse_args()
    setup_django(Path(args.dir), Path(args.state_dir))
    import uvicorn

    app = make_app(args.sdk_validation)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
