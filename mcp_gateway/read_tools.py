"""The read utilities (issue #32, seed 002): checksum, diff, several slices, byte ranges, images."""

from __future__ import annotations

from corpus.navigation import reads
from corpus.navigation import verify as grounding
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import budgets, read_schemas, summaries
from mcp_gateway.registry import Budget, Tool
from mcp_gateway.tools import Call, open_file


def checksum(call: Call, args: JsonObject) -> JsonObject:
    return reads.checksum(call.ctx.engine, args["rel_path"], algorithm=args["algorithm"], check=call.check)


def diff(call: Call, args: JsonObject) -> JsonObject:
    return reads.diff(
        call.ctx.engine,
        args["rel_path_a"],
        args["rel_path_b"],
        context=args["context"],
        max_chars=args["max_chars"],
        check=call.check,
    )


def read_bytes(call: Call, args: JsonObject) -> JsonObject:
    return reads.read_bytes(
        call.ctx.engine,
        args["rel_path"],
        offset=args.get("offset"),
        length=args.get("length"),
        fmt=args["format"],
        check=call.check,
    )


def image_content(result: JsonObject) -> tuple[JsonObject, list[JsonObject]]:
    """``Tool.split_content`` of read_bytes: an image's data as an image
    content item, not in ``structuredContent`` (a client that shows the
    structured result to its model would read megabytes of base64)."""
    data = result.get("_image_data")
    if data is None:
        return result, []
    structured = {k: v for k, v in result.items() if k != "_image_data"}  # packaged again under a budget
    return structured, [{"type": "image", "data": data, "mimeType": result["mime_type"]}]


def verify(call: Call, args: JsonObject) -> JsonObject:
    return grounding.verify(call.ctx.engine, args["text"], check=call.check)


def open_files(call: Call, args: JsonObject) -> JsonObject:
    """Each slice as dir2mcp.open_file answers it, an error for one refused."""
    share = max(200, args["max_chars"] // len(args["slices"]))
    out = []
    for piece in args["slices"]:
        call.check()
        try:
            out.append({"result": open_file(call, {**piece, "max_chars": share})})
        except errors.Dir2mcpError as exc:
            out.append({"error": exc.as_dict()})
    return {"slices": out, "truncated": any(s.get("result", {}).get("truncated") for s in out)}


TOOLS: tuple[Tool, ...] = (
    budgets.declared(
        Tool(
            name="dir2mcp.open_files",
            title="Open several slices at once",
            description=(
                "Read up to 20 slices in one call, each as dir2mcp.open_file takes it (rel_path with "
                "start_line/end_line, page, or start_ms/end_ms), sharing max_chars. A slice that is refused "
                "gets its error in place; the others are still returned."
            ),
            input_schema=read_schemas.OPEN_FILES_INPUT,
            output_schema=read_schemas.OPEN_FILES_OUTPUT,
            handler=open_files,
            summarize=summaries.open_files,
        ),
        Budget(knob="max_chars", floor=200, advice="open fewer slices at a time"),
    ),
    Tool(
        name="dir2mcp.checksum",
        title="Checksum a file",
        description=(
            "The digest of a file's bytes as they are now: sha256 (default), md5, sha1 or sha512. Use it to "
            "tell whether two files, or a file and a copy elsewhere, are the same."
        ),
        input_schema=read_schemas.CHECKSUM_INPUT,
        output_schema=read_schemas.CHECKSUM_OUTPUT,
        handler=checksum,
        summarize=summaries.checksum,
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.diff",
            title="Diff two files",
            description=(
                "A unified diff of two files' text: lines of text and code files, or the extracted text of "
                "converted ones (two PDFs' text, page by page). Capped by max_chars, with truncated."
            ),
            input_schema=read_schemas.DIFF_INPUT,
            output_schema=read_schemas.DIFF_OUTPUT,
            handler=diff,
            summarize=summaries.diff,
        ),
        Budget(knob="max_chars", floor=200),
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.read_bytes",
            title="Read a file's bytes, or an image",
            description=(
                "Read a file by byte range (offset, length: default 65536, at most 1 MiB) as UTF-8 text or "
                "base64, with eof and next_offset to continue; or an image file (PNG, JPEG, GIF, WebP; TIFF "
                "and BMP as PNG or JPEG) whole as MCP image content, scaled down to fit 1 MiB. Use "
                "dir2mcp.open_file for lines, pages and time ranges; this is for exact bytes, files that are "
                "not indexed as text, and looking at an image."
            ),
            input_schema=read_schemas.READ_BYTES_INPUT,
            output_schema=read_schemas.READ_BYTES_OUTPUT,
            handler=read_bytes,
            summarize=summaries.read_bytes,
            split_content=image_content,
        ),
        Budget(knob="length", start=reads.DEFAULT_LENGTH, floor=256, advice="continue from next_offset"),
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.verify",
            title="Check the citations in a text",
            description=(
                "Check every citation in a text ([path:L1-L9], [doc.pdf#p=3], [talk.wav@t=01:05-01:35]): the "
                "file exists, the span lies inside it, and each quotation made right before a citation (in "
                "quotes or backticks) is in the cited slice. Use it on a draft answer before relying on it."
            ),
            input_schema=read_schemas.VERIFY_INPUT,
            output_schema=read_schemas.VERIFY_OUTPUT,
            handler=verify,
            summarize=summaries.verify,
        ),
        Budget(items="citations"),
    ),
)
