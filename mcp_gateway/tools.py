"""Running tools: ``tools/list`` pages, input validation, :func:`run` for
every surface, and the core tools (search, ask, open_file, list_files, find,
stats). The table itself is :mod:`mcp_gateway.registry`.

Handlers are plain sync functions ``(call, args) -> dict`` over the corpus
services; they raise :class:`~kernel.errors.Dir2mcpError` for anything the
caller can fix, which :func:`run` turns into an ``isError`` result (§12.4,
§14). Summaries turn the structured result into the ``content[0]`` text an
agent reads, with citations.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from corpus import files, store_faults
from corpus.answer import ask as answer
from corpus.files import canonical_prefix
from corpus.index.dense.embedding import recipe_summary
from corpus.ingest import coverage
from corpus.ingest.pending import pending_count
from corpus.navigation import budget
from corpus.navigation import verify as grounding
from corpus.retrieval import Filters, SearchResult
from corpus.security import MAX_PATH_CHARS, MAX_PATH_SEGMENTS
from corpus.status import latest_job, models_summary, older_format_documents
from kernel import errors, observe
from kernel.jsontypes import JsonObject
from mcp_gateway import budgets, freshness, hints, indexer_process, links, notify, schemas, summaries
from mcp_gateway.context import Context
from mcp_gateway.registry import Budget, Tool
from mcp_gateway.registry import Call as Call  # the transports and handlers reach it through tools
from mcp_gateway.registry import Cancelled as Cancelled  # as Call
from mcp_gateway.registry import table as table  # callers reach the table through tools
from mcp_gateway.transport import LATEST_VERSION

if TYPE_CHECKING:  # jsonschema loads with the first call validated (registry.Tool.validator), not with `up`
    from jsonschema.exceptions import ValidationError

log = logging.getLogger(__name__)

PAGE_SIZE = 50


# -- tools/list ---------------------------------------------------------------


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"tools:{offset}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        offset = int(number)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("invalid cursor") from None
    if prefix != "tools" or not 0 <= offset < len(table()):
        raise ValueError("invalid cursor")
    return offset


def list_page(cursor: str | None = None, page_size: int | None = None) -> JsonObject:
    """One page of tool definitions; ``ValueError`` for a bad cursor."""
    size = page_size or PAGE_SIZE
    start = 0 if cursor is None else _decode_cursor(cursor)
    tools = list(table().values())
    page: JsonObject = {"tools": [tool.definition() for tool in tools[start : start + size]]}
    if start + size < len(tools):
        page["nextCursor"] = _encode_cursor(start + size)
    return page


# -- tools/call ---------------------------------------------------------------


def _validation_error(exc: ValidationError) -> errors.Dir2mcpError:
    where = ".".join(str(p) for p in exc.absolute_path) or "arguments"
    if exc.validator == "required":
        return errors.Dir2mcpError(errors.MISSING_FIELD, exc.message)
    if (
        exc.validator in ("maxLength", "pattern")
        and isinstance(exc.schema, Mapping)
        and exc.schema.get("pattern") == schemas.PATH_SEGMENTS_PATTERN
    ):
        # A path argument past its bounds: INVALID_FIELD, as corpus.security.check_path_bounds says it.
        if exc.validator == "maxLength":
            return errors.Dir2mcpError(
                errors.INVALID_FIELD, f"{where} is longer than {MAX_PATH_CHARS} characters"
            )
        return errors.Dir2mcpError(
            errors.INVALID_FIELD, f"{where} has more than {MAX_PATH_SEGMENTS} segments"
        )
    if exc.validator == "maxLength":  # the message would quote the whole value
        limit = exc.validator_value
        return errors.Dir2mcpError(errors.INVALID_RANGE, f"{where} is longer than {limit} characters")
    if exc.validator == "maxItems":  # the message would quote the whole list
        return errors.Dir2mcpError(errors.INVALID_RANGE, f"{where} has more than {exc.validator_value} items")
    if exc.validator in (
        "minimum",
        "maximum",
        "minLength",
        "exclusiveMinimum",
        "exclusiveMaximum",
    ):
        return errors.Dir2mcpError(errors.INVALID_RANGE, f"{where}: {exc.message}")
    if exc.validator == "additionalProperties":
        return errors.Dir2mcpError(errors.INVALID_FIELD, f"unknown argument: {exc.message}")
    return errors.Dir2mcpError(errors.INVALID_FIELD, f"{where}: {exc.message}")


def validate_arguments(tool: Tool, arguments: object) -> JsonObject:
    """The arguments with schema defaults applied; Dir2mcpError otherwise."""
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise errors.Dir2mcpError(errors.INVALID_FIELD, "arguments must be an object")
    error = next(iter(sorted(tool.validator.iter_errors(arguments), key=lambda e: e.path)), None)
    if error is not None:
        raise _validation_error(error)
    defaults = {
        name: prop["default"]
        for name, prop in tool.input_schema.get("properties", {}).items()
        if "default" in prop
    }
    return {**defaults, **arguments}


def error_result(exc: errors.Dir2mcpError) -> JsonObject:
    payload = exc.as_dict()
    return {
        "isError": True,
        "content": [{"type": "text", "text": f"ERROR: {exc.code}: {exc.message}"}],
        "structuredContent": {"error": payload},
    }


def run(tool: Tool, arguments: object, call: Call) -> JsonObject:
    """Validate, run and package one call as a ``CallToolResult``, counted
    in the metrics (``/metrics``: calls and latency by tool). Every surface
    runs tools here: ``tools/call`` over HTTP and stdio, and the REST mirror.

    :class:`Cancelled` propagates: the transport decides what a cancelled
    request answers (nothing on a stream).
    """
    started = time.perf_counter()
    result = _run(tool, arguments, call)
    observe.observe_tool(tool.name, time.perf_counter() - started, bool(result.get("isError")))
    return result


def _run(tool: Tool, arguments: object, call: Call) -> JsonObject:
    try:
        args = validate_arguments(tool, arguments)
        given = arguments if isinstance(arguments, dict) else {}  # what the client gave, not the defaults
        return budgets.run(
            tool.name,
            tool.budget,
            args,
            lambda a: freshness.attach(tool, tool.handler(call, a), call.ctx.root),
            lambda r: package(tool, r, given),
        )
    except errors.Dir2mcpError as exc:
        return error_result(exc)
    except Cancelled:
        raise
    except Exception as exc:  # a bug must not become a traceback on the wire
        fault = store_faults.classify(exc)  # a damaged database, a full disk: named, not a bug
        if fault is not None:
            log.warning("tool %s: %s", tool.name, fault)
            return error_result(fault)
        log.exception("tool %s failed", tool.name)
        return error_result(
            errors.Dir2mcpError(errors.INTERNAL_ERROR, f"{tool.name} failed; see the server log")
        )


def package(tool: Tool, result: JsonObject, args: JsonObject) -> JsonObject:
    """The ``CallToolResult`` of a handler's result: its summary, any further
    content items, the structured result, how fresh it is and the next
    actions it suggests."""
    extra: list[JsonObject] = []
    if tool.split_content is not None:
        result, extra = tool.split_content(result)
    result = freshness.narrow(tool, result)
    text = tool.summarize(result)
    if (stale := freshness.note(result)) is not None:
        text = f"{text}\n{stale}"
    packaged: JsonObject = {"content": [{"type": "text", "text": text}, *extra], "structuredContent": result}
    actions = tool.next_actions(result, args)[: hints.MOST] if tool.next_actions is not None else []
    if actions:
        packaged["content"][0]["text"] = f"{text}\n{hints.line(actions)}"
        packaged["_meta"] = {hints.META_NEXT: actions}
    return packaged


# -- the tools ------------------------------------------------------------------


def _filters(args: JsonObject) -> Filters:
    return Filters(
        path_prefix=canonical_prefix(args.get("path_prefix", "")),
        file_glob=args.get("file_glob", ""),
        doc_types=tuple(args.get("doc_types") or ()),
    )


def search(call: Call, args: JsonObject) -> JsonObject:
    call.progress(0, 1, "searching")
    cursor = args.get("cursor")
    start = budgets.page_position(cursor, "dir2mcp.search", args) if isinstance(cursor, str) else 0
    result = call.ctx.searcher.search(
        args["query"], k=args["k"], index=args["index"], filters=_filters(args), start=start
    )
    call.check()
    call.progress(1, 1, f"{len(result.hits)} hits")
    _embed_first(call.ctx, [hit.rel_path for hit in result.hits])
    out = result.as_dict()
    if result.next_start is not None:  # the hits after these, in the same ranking
        out["next_cursor"] = budgets.page_cursor("dir2mcp.search", args, result.next_start)
    if "max_tokens" in args:
        out |= _within_budget(call, result, args["max_tokens"])
    return out


def _within_budget(call: Call, result: SearchResult, max_tokens: int) -> JsonObject:
    """The hits as passages with their text, merged per file, in rank order
    (:func:`mcp_gateway.budgets.run` keeps those that fit)."""
    passages = budget.merge(result.hits)
    contents = budget.Contents()
    for passage in passages:
        passage.content = contents(passage)
        files.screen(call.ctx.engine, passage.best.rel_path, passage.content)
    return {
        "hits": [passage.as_dict() for passage in passages],
        "budget": {"merged": len(result.hits) - len(passages)},
    }


def _embed_first(ctx: Context, rel_paths: list[str], *, again: bool = False) -> None:
    """Files a client asks about are embedded before the rest (issue #17):
    ask the indexer (the child process, or the thread in this process) while
    embedding is not complete; ``again``: ahead of the files asked since. A
    process that does not index (a serving-only daphne of a deployment) asks
    the one that does, through the channel layer (docs/scaling.md)."""
    if not rel_paths:
        return
    supervisor = getattr(ctx, "indexer", None)
    if supervisor is not None:
        supervisor.embed_first(rel_paths, again=again)
    else:
        notify.HUB.ask(rel_paths, again=again)


def ask(call: Call, args: JsonObject) -> JsonObject:
    ctx = call.ctx
    chat = ctx.chat if args["mode"] == "answer" else None
    call.progress(0, 2, "searching")
    call.log("info", f"ask: retrieving {args['k']} passages" + (" and generating an answer" if chat else ""))
    call.check()
    result = answer(
        args["question"],
        searcher=ctx.searcher,
        chat=chat,
        config=ctx.config,
        k=args["k"],
        mode=args["mode"],
        index=args["index"],
        filters=_filters(args),
        on_retrieved=lambda found: _retrieved(call, found, generating=chat is not None),
    )
    call.check()
    call.progress(2, 2, "answered")
    out = result.as_dict()
    if result.generated:  # the model's own citations, checked against the files
        out["verification"] = grounding.verify(ctx.engine, result.answer)
    return out


def _retrieved(call: Call, found: SearchResult, *, generating: bool) -> None:
    call.check()
    call.progress(1, 2, f"{len(found.hits)} passages" + ("; generating the answer" if generating else ""))


def open_file(call: Call, args: JsonObject) -> JsonObject:
    keys = ("start_line", "end_line", "page", "start_ms", "end_ms", "max_chars")
    _embed_first(call.ctx, [args["rel_path"]], again=True)  # a file opened goes first
    return files.open_file(
        call.ctx.engine,
        rel_path=args["rel_path"],
        check=call.check,
        **{k: args[k] for k in keys if k in args},
    )


def list_files(call: Call, args: JsonObject) -> JsonObject:
    return files.list_files(
        path_prefix=args.get("path_prefix", ""),
        glob=args.get("glob", ""),
        limit=args["limit"],
        offset=args["offset"],
        engine=call.ctx.engine,
        cursor=args.get("cursor"),
    )


def find(call: Call, args: JsonObject) -> JsonObject:
    keys = (
        "name_glob",
        "content",
        "regex",
        "case_sensitive",
        "path_prefix",
        "modified_after",
        "limit",
        "cursor",
    )
    call.progress(0, None, "scanning")
    result = files.find(
        call.ctx.engine,
        doc_types=tuple(args.get("doc_types") or ()),
        stop=call.cancel.is_set,
        **{k: args[k] for k in keys if k in args},
    )
    call.check()
    return result


def stats(call: Call, args: JsonObject) -> JsonObject:
    ctx = call.ctx
    job = latest_job()
    counters = job.counters() if job else {}
    indexing = {
        "job_id": job.job_id if job else "",
        "running": bool(job and job.running),
        "mode": job.mode if job and job.mode in ("incremental", "full") else "incremental",
        **{
            name: int(counters.get(name, 0))
            for name in schemas.STATS_OUTPUT["properties"]["indexing"]["required"][3:]
        },
    }
    return {
        "root": str(ctx.root),
        "state_dir": str(ctx.state.path),
        "protocol_version": LATEST_VERSION,
        "schema_version": schemas.SCHEMA_VERSION,
        "indexing": indexing,
        "models": models_summary(
            ctx.config, embedder=ctx.embedder, chat=ctx.chat, live=True, secret=ctx.secret
        ),
        "embedder": ctx.embedder_choice().as_dict(),
        "signature_weight": recipe_summary(ctx.config.embed.signature_weight),
        "indexer": indexer_process.summary(ctx),
        "documents_on_older_format": older_format_documents(),
        "coverage": coverage.summary(),
        "pending_changes": pending_count(),
    }


#: The core tools, in the contract's order (``McpGatewayConfig.ready`` registers them).
TOOLS: tuple[Tool, ...] = (
    budgets.declared(
        Tool(
            name="dir2mcp.search",
            title="Search the directory",
            description=(
                "Hybrid keyword + semantic search over every indexed file in this directory: code, docs, "
                "PDFs (per page), OCR'd images and audio transcripts. Use it first to locate where something "
                "is written or implemented; identifiers (snake_case, camelCase, paths) match well. Each hit "
                "has rel_path, a snippet and a span (line range, PDF page or audio time range) that you can "
                "pass to dir2mcp.open_file to read the exact source. Narrow with path_prefix, file_glob or "
                "doc_types. The ranking does not depend on k: pass next_cursor as cursor for the hits "
                "after these."
            ),
            input_schema=schemas.SEARCH_INPUT,
            output_schema=schemas.SEARCH_OUTPUT,
            handler=search,
            summarize=summaries.search,
            split_content=links.search_links,
        ),
        Budget(items="hits", paging="cursor", shrink=budget.cut_passage),
        hints.search,
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.ask",
            title="Answer a question from the directory",
            description=(
                "Answer a natural-language question from this directory's contents, with citations "
                "([path:L10-L20], [file.pdf#p=3], [audio.wav@t=01:05-01:35]). It retrieves the top k "
                "passages and, when a chat model is configured, writes an answer grounded only in them; "
                "otherwise (or with mode=search_only) it returns the passages. Verify important claims with "
                "dir2mcp.open_file."
            ),
            input_schema=schemas.ASK_INPUT,
            output_schema=schemas.ASK_OUTPUT,
            handler=ask,
            summarize=summaries.ask,
            split_content=links.ask_links,
        ),
        Budget(knob="k", floor=1, advice="dir2mcp.search with a cursor reads further"),
        hints.ask,
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.open_file",
            title="Open an exact slice of a file",
            description=(
                "Read an exact slice of a file under the root to verify a citation or see more context: "
                "lines (start_line/end_line), a PDF page (page), or an audio transcript time range "
                "(start_ms/end_ms). Without a range it returns the beginning. Output is capped by max_chars "
                "and says when it was truncated. Excluded or secret-bearing files are refused."
            ),
            input_schema=schemas.OPEN_FILE_INPUT,
            output_schema=schemas.OPEN_FILE_OUTPUT,
            handler=open_file,
            summarize=summaries.open_file,
        ),
        Budget(knob="max_chars", floor=200, advice="open the lines after the span"),
        hints.open_file,
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.list_files",
            title="List indexed files",
            description=(
                "List the indexed files (path, type, size, modified time, index status), filtered by "
                "path_prefix and glob, paged with limit and next_cursor (or offset). Use it to explore the "
                "directory's layout or to pick filters for search. offset counts the files the exclusion "
                "rules let through now, up to 10,000; next_cursor, given while more follow, pages any "
                "depth at the same cost. total is given when the listing ends within 500 files of the page "
                "(never on a page reached by cursor), and has_more says whether more follow."
            ),
            input_schema=schemas.LIST_FILES_INPUT,
            output_schema=schemas.LIST_FILES_OUTPUT,
            handler=list_files,
            summarize=summaries.list_files,
        ),
        Budget(items="files", paging="cursor"),
    ),
    budgets.declared(
        Tool(
            name="dir2mcp.find",
            title="Find files by name, content or date",
            description=(
                "Find files by name glob, exact text or regular expression in their content (including OCR "
                "text and transcripts), document type or modification date. Unlike search, it is exhaustive "
                "and literal: use it for exact strings, error messages or every occurrence of an identifier. "
                "Matches carry line/page/time spans; page through with cursor."
            ),
            input_schema=schemas.FIND_INPUT,
            output_schema=schemas.FIND_OUTPUT,
            handler=find,
            summarize=summaries.find,
        ),
        Budget(items="matches", paging="cursor"),
        hints.find,
    ),
    Tool(
        name="dir2mcp.stats",
        title="Index status and models",
        description=(
            "Report indexing progress (scanned, indexed, chunks, embedded, errors; whether indexing is still "
            "running) and which models serve embeddings, OCR, transcription and answers. Check it when "
            "results look incomplete."
        ),
        input_schema=schemas.STATS_INPUT,
        output_schema=schemas.STATS_OUTPUT,
        handler=stats,
        summarize=summaries.stats,
    ),
)

# Their answers say how fresh they are, checking the files each result cites.
TOOLS = freshness.citing(
    TOOLS,
    {
        "dir2mcp.search": freshness.items("hits"),
        "dir2mcp.ask": freshness.items("citations", "hits"),
        "dir2mcp.open_file": freshness.own_path,
        "dir2mcp.list_files": freshness.items("files"),
        "dir2mcp.find": freshness.items("matches"),
    },
)
