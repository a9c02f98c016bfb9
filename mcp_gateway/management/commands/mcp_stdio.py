"""``dir2mcp mcp_stdio``: serve a directory over MCP stdio while it is indexed.

An MCP client launches this command and speaks newline-delimited JSON-RPC
on its stdin/stdout (see :mod:`mcp_gateway.stdio`). stdout is reserved for
protocol messages from the first moment: every human line, NDJSON event,
warning and fatal error goes to stderr. Authentication is off, since the
pipe is private to the client that started us.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import CommandParser, OutputWrapper

from corpus.management.base import Dir2mcpCommand
from mcp_gateway import background, stdio
from mcp_gateway.stdout_guard import StdoutGuard


class Command(Dir2mcpCommand):
    help = (
        "Serve a directory over MCP stdio (newline-delimited JSON-RPC on stdin/stdout) and index it "
        "in the background, following file changes until stdin closes. Logs go to stderr."
    )

    def add_command_arguments(self, parser: CommandParser) -> None:
        group = parser.add_argument_group("stdio server")
        group.add_argument(
            "--no-index",
            action="store_true",
            help="Serve the existing index only: no background indexing, no file watching.",
        )
        group.add_argument(
            "--read-only",
            action="store_true",
            help="Refuse (FORBIDDEN) any tool that would store something, such as annotate's result or "
            "transcribe's transcript; indexing goes on.",
        )

    def execute(self, *args: Any, **options: Any) -> str | None:  # Any: BaseCommand.execute's signature
        # Before anything can print: the real stdout becomes a private handle
        # for protocol messages, and everything else (this command's own
        # output included) is written to stderr.
        with StdoutGuard() as protocol:
            self.protocol = protocol
            self.stdout = OutputWrapper(sys.stderr)
            options.pop("stdout", None)
            return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options)
        if options["no_index"]:
            background.serve_read_only_state(rt)
        # auth off: a private pipe, whoever holds it started us
        ctx = background.serving_context(
            rt, self.prepare_state, auth_spec="none", read_only=bool(options["read_only"])
        )
        # Load the tool registry now, so the first call does not pay for imports.
        from mcp_gateway import tools  # noqa: F401

        index = not options["no_index"]
        rt.reporter.event(
            "server_started",
            {
                "transport": "stdio",
                "pid": os.getpid(),
                "root": str(rt.root),
                "state_dir": str(rt.state.path),
                "indexing": index,
            },
        )
        rt.reporter.say(
            f"dir2mcp: serving {rt.root} over MCP stdio (index: {rt.state.path}"
            + ("; indexing in background)" if index else "; existing index only)")
        )
        reason = stdio.serve(
            ctx, out=self.protocol, infd=sys.stdin.fileno(), reporter=rt.reporter, index=index
        )
        rt.reporter.event("server_stopped", {"reason": reason})
        rt.reporter.say(f"dir2mcp: {reason}; stopped.")
