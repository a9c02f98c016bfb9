"""The navigation tools (issue #32): a file's outline."""

from __future__ import annotations

from corpus.navigation import outline as outlines
from mcp_gateway import navigation_schemas, summaries
from mcp_gateway.registry import Tool
from mcp_gateway.tools import Call


def outline(call: Call, args: dict) -> dict:
    found = outlines.outline(call.ctx.engine, args["rel_path"])
    kept, total = outlines.prune(found.entries, args["max_entries"])
    result = found.as_dict() | {"entries": [entry.as_dict() for entry in kept]}
    return result | {
        "count": sum(1 for _ in outlines.walk(kept)),
        "total": total,
        "truncated": found.truncated or total > args["max_entries"],
    }


TOOLS = (
    Tool(
        name="dir2mcp.outline",
        title="Outline a file",
        description=(
            "List a file's definitions as a tree (functions, classes, methods, types … with their signature "
            "line and line span), or a document's headings, or a PDF's pages: what is in a file, at a "
            "fraction of its tokens. Code in Python, JavaScript/TypeScript/TSX, Go, Rust, Java, C, C++, "
            "Ruby and shell; Markdown, reStructuredText and HTML headings. Pass a span to "
            "dir2mcp.open_file to read one entry."
        ),
        input_schema=navigation_schemas.OUTLINE_INPUT,
        output_schema=navigation_schemas.OUTLINE_OUTPUT,
        handler=outline,
        summarize=summaries.outline,
    ),
)
