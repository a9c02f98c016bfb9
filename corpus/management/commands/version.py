from typing import Any

from corpus.management.base import Dir2mcpCommand
from kernel import __version__
from kernel.config import PROTOCOL_VERSION
from kernel.state import INDEX_FORMAT_VERSION


class Command(Dir2mcpCommand):
    help = "Print the dir2mcp version, MCP protocol version and index format."

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        info = {
            "version": __version__,
            "protocol_version": PROTOCOL_VERSION,
            "index_format": INDEX_FORMAT_VERSION,
        }
        if options.get("json"):
            import json

            self.stdout.write(json.dumps(info))
            return
        self.stdout.write(
            f"dir2mcp {__version__} (MCP protocol {PROTOCOL_VERSION}, index format {INDEX_FORMAT_VERSION})"
        )
