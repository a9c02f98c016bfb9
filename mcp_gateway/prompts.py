"""MCP prompts (``prompts/list``, ``prompts/get``): requests a person picks
from a client's menu, filled in from this directory.

``ask`` answers a question with citations, ``explain`` explains a file or a
symbol (the file, or the symbol's definition, embedded as a resource), and
``changes`` summarises the files modified since a date (each one linked as a
resource). What is embedded is read as ``resources/read`` reads it, through
the one exclusion engine: nothing outside the root, excluded or
secret-bearing is ever embedded or linked.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Q, QuerySet

from corpus import arguments, documents, files, uris
from corpus import rows as rows_of
from corpus.citations import SpanRef, format_citation
from corpus.definitions import defines
from corpus.models import Document
from corpus.retrieval import Filters, Hit
from corpus.security import canonical_rel_path
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import resources
from mcp_gateway.context import Context

PAGE_SIZE = 50
#: files the ``changes`` prompt links at most (the rest are counted)
MAX_CHANGED = 50
#: files the ``changes`` prompt counts at most, judging each against the
#: rules as they are now (past it, "more" without a count)
COUNTED_CHANGED = 4 * (MAX_CHANGED + 1)
#: files the rules exclude now (still in the index) it passes over before
#: it stops judging, without a count
PASSED_OVER = 1000
#: lines of a file too large to embed whole that are embedded instead
HEAD_LINES = 400
MAX_ARGUMENT_CHARS = 4096


class PromptError(Exception):
    """A prompts or completion request that fails: a JSON-RPC code, a message
    safe to show, and optional ``data`` (the dir2mcp code of a refusal)."""

    def __init__(
        self, message: str, data: JsonObject | None = None, rpc_code: int = errors.RPC_INVALID_PARAMS
    ) -> None:
        super().__init__(message)
        self.message, self.data, self.rpc_code = message, data, rpc_code


def invalid(message: str, data: JsonObject | None = None) -> PromptError:
    """-32602 Invalid params: the client must change its request."""
    return PromptError(message, data)


@dataclass(frozen=True)
class Argument:
    name: str
    title: str
    description: str
    required: bool = False
    #: how completion/complete fills it: "path", "symbol", "date" or None
    kind: str | None = None

    def definition(self) -> JsonObject:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "required": self.required,
        }


@dataclass(frozen=True)
class Prompt:
    name: str
    title: str
    description: str
    arguments: tuple[Argument, ...]
    build: Callable[[Context, JsonObject], tuple[str, list[JsonObject]]]

    def definition(self) -> JsonObject:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "arguments": [argument.definition() for argument in self.arguments],
        }


def listable_documents() -> QuerySet[Document]:
    """Live documents a client may see: not the ones skipped as secret-bearing."""
    return files.listable_documents()


# -- content blocks -----------------------------------------------------------------


def _user(content: JsonObject) -> JsonObject:
    return {"role": "user", "content": content}


def _text(text: str) -> JsonObject:
    return _user({"type": "text", "text": text})


def embedded(ctx: Context, uri: str) -> JsonObject:
    """A message embedding the resource ``uri``, read as ``resources/read``
    reads it (the same refusals: outside the root, excluded, secret-bearing)."""
    try:
        (contents,) = resources.read(ctx, uri)
    except resources.ResourceError as exc:
        # A file the argument names that is not there for this client: a bad argument.
        code = errors.RPC_INVALID_PARAMS if exc.rpc_code == errors.RPC_RESOURCE_NOT_FOUND else exc.rpc_code
        raise PromptError(exc.message, exc.data, code) from None
    return _user({"type": "resource", "resource": contents})


def resource_link(doc: Document) -> JsonObject:
    """A message linking ``doc`` as ``resources/list`` lists it."""
    listed = documents.Listed(doc.rel_path, doc.doc_type, doc.size_bytes, doc.mtime_unix)
    return _user({"type": "resource_link", **resources.resource(listed)})


# -- ask -----------------------------------------------------------------------------

_CITING = (
    "Cite every claim with the citation the tools print for the passage it rests on: "
    f"{format_citation('path', SpanRef('lines', 10, 20))} for lines, "
    f"{format_citation('path', SpanRef('page', 3, 3))} for a PDF page, "
    f"{format_citation('path', SpanRef('time', 65000, 95000))} for a recording."
)


def build_ask(ctx: Context, args: JsonObject) -> tuple[str, list[JsonObject]]:
    text = (
        "Answer the question below from the files of this directory only.\n\n"
        "1. Call dir2mcp.search with the question's key terms (dir2mcp.find for an exact string).\n"
        "2. Read the passages you rely on with dir2mcp.open_file (rel_path and span from each hit).\n"
        f"3. {_CITING}\n"
        "If the files do not hold the answer, say so instead of guessing.\n\n"
        f"Question: {args['question']}"
    )
    return "Answer a question with citations from this directory", [_text(text)]


# -- explain ---------------------------------------------------------------------------


def build_explain(ctx: Context, args: JsonObject) -> tuple[str, list[JsonObject]]:
    path, symbol = args.get("path", ""), args.get("symbol", "")
    if not path and not symbol:
        raise invalid("explain needs a path or a symbol (or both: the symbol in that file)")
    if symbol:
        return _explain_symbol(ctx, symbol, path)
    try:
        rel = canonical_rel_path(path)
    except errors.Dir2mcpError as exc:
        raise invalid(exc.message, {"code": exc.code}) from None
    resource, partial = _whole_or_head(ctx, rel)
    text = (
        f"Explain the file {rel}, attached below: what it is for, its main parts and how they work, "
        "and how it fits with the rest of this directory (dir2mcp.search and dir2mcp.open_file find "
        f"what it refers to). {_CITING}"
    )
    if partial:
        text += f" Only its first {HEAD_LINES} lines are attached; read on with dir2mcp.open_file."
    return f"Explain {rel}", [_text(text), resource]


def _whole_or_head(ctx: Context, rel: str) -> tuple[JsonObject, bool]:
    """The whole file embedded, or its first lines when it is too large to
    read whole; and whether it is only the head."""
    try:
        return embedded(ctx, uris.file_uri(rel)), False
    except PromptError as exc:
        if (exc.data or {}).get("code") != errors.FILE_TOO_LARGE:
            raise
    return embedded(ctx, uris.slice_uri(rel, SpanRef("lines", 1, HEAD_LINES))), True


def _explain_symbol(ctx: Context, symbol: str, path: str) -> tuple[str, list[JsonObject]]:
    hit = find_definition(ctx, symbol, path)
    if hit is None:
        where = f" in {path}" if path else ""
        raise invalid(f"no definition of {symbol!r} found{where} in the index")
    resource = embedded(ctx, uris.slice_uri(hit.rel_path, hit.span))
    citation = format_citation(hit.rel_path, hit.span)
    text = (
        f"Explain {symbol}, defined at {citation} (attached below): what it does, its inputs and "
        "results, and where it is used (dir2mcp.find with its name lists the uses; read them with "
        f"dir2mcp.open_file). {_CITING}"
    )
    return f"Explain {symbol}", [_text(text), resource]


def find_definition(ctx: Context, symbol: str, path: str = "") -> Hit | None:
    """The search hit whose unit defines ``symbol`` (in ``path`` if given), or None."""
    try:
        filters = Filters(path_prefix=files.canonical_prefix(path)) if path else Filters()
        found = ctx.searcher.search(symbol, k=20, index="code", filters=filters)
    except errors.Dir2mcpError as exc:
        raise invalid(exc.message, {"code": exc.code}) from None
    return next((hit for hit in found.hits if defines(hit.text, symbol.split(".")[-1])), None)


# -- changes ---------------------------------------------------------------------------


def parse_since(value: str) -> datetime:
    """An ISO-8601 date or date-time (UTC when it names no zone)."""
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"since must be an ISO-8601 date such as 2025-11-25, not {value[:64]!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def changed_since(ctx: Context, since: datetime) -> tuple[list[Document], int | None]:
    """The listable documents modified after ``since`` that the rules let
    through now, newest first (at most :data:`MAX_CHANGED`), and how many
    there are in all: None when more than :data:`COUNTED_CHANGED` are, or
    judging passed over more than :data:`PASSED_OVER` the rules exclude now.
    Until session 27 the count took the index's word for the files past the
    first :data:`MAX_CHANGED`, and told, ``since`` after ``since``, when a
    file excluded since the index was written had last changed."""
    seconds = since.timestamp()
    nanoseconds = max(
        -arguments.INT64_MAX, min(arguments.INT64_MAX, int(seconds * 1_000_000_000))
    )  # a bigint column
    after = Q(mtime_ns__gt=nanoseconds) | Q(mtime_ns=0, mtime_unix__gt=int(seconds))
    docs = listable_documents().filter(after).order_by("-mtime_ns", "-mtime_unix", "rel_path")
    engine = ctx.engine
    allowed: list[int] = []
    passed_over, ended = 0, True
    with engine.pinned(), rows_of.streamed(docs.values_list("doc_id", "rel_path"), 500) as rows:
        for doc_id, rel_path in files.primed(engine, rows, lambda row: row[1]):  # a batch a query
            if engine.listed_reason(rel_path) is not None:
                passed_over += 1
                if passed_over > PASSED_OVER:
                    ended = False
                    break
            elif len(allowed) == COUNTED_CHANGED:
                ended = False
                break
            else:
                allowed.append(doc_id)
    shown = Document.objects.in_bulk(allowed[:MAX_CHANGED])
    return [shown[doc_id] for doc_id in allowed[:MAX_CHANGED]], len(allowed) if ended else None


def build_changes(ctx: Context, args: JsonObject) -> tuple[str, list[JsonObject]]:
    since = parse_since(args["since"])
    changed, total = changed_since(ctx, since)
    day = since.isoformat()
    if not changed:
        text = f"No file of this directory was modified since {day}. Say so."
        return f"Files changed since {day}", [_text(text)]
    listing = "\n".join(f"- {d.rel_path} (modified {_iso(d)})" for d in changed)
    find = "(dir2mcp.find with modified_after lists them)"
    if total is None:
        more, these = f"\n…and more {find}.", f"These {len(changed)} files, and more,"
    else:
        more = f"\n…and {total - len(changed)} more {find}." if total > len(changed) else ""
        these = f"These {total} files"
    text = (
        f"Summarise what changed in this directory since {day}. {these} were modified "
        f"after it, newest first; each is attached as a resource link:\n{listing}{more}\n\n"
        "Earlier versions are not kept, so read each file (resources/read, or dir2mcp.open_file) "
        "and describe what it holds now and what it is for; group related files, and cite what you "
        f"rely on. {_CITING}"
    )
    return f"Files changed since {day}", [_text(text), *(resource_link(d) for d in changed)]


def _iso(doc: Document) -> str:
    return datetime.fromtimestamp(doc.mtime_unix, UTC).strftime("%Y-%m-%d %H:%M UTC")


# -- the registry and the methods ----------------------------------------------------

REGISTRY: dict[str, Prompt] = {
    prompt.name: prompt
    for prompt in (
        Prompt(
            "ask",
            "Ask this directory",
            "Answer a question from the files of this directory, citing each claim as [path:Lx-Ly].",
            (Argument("question", "Question", "What you want to know.", required=True),),
            build_ask,
        ),
        Prompt(
            "explain",
            "Explain a file or a symbol",
            "Explain a file (attached whole) or a function, class or other symbol (its definition "
            "attached), with citations. Give a path, a symbol, or both to pick the symbol in that file.",
            (
                Argument("path", "File", "A file's path under the root, e.g. src/app.py.", kind="path"),
                Argument("symbol", "Symbol", "A name defined in the code, e.g. parse_config.", kind="symbol"),
            ),
            build_explain,
        ),
        Prompt(
            "changes",
            "What changed since…",
            "Summarise what changed in the files modified since a date (each file linked as a resource).",
            (
                Argument(
                    "since",
                    "Since",
                    "An ISO-8601 date or date-time, e.g. 2025-11-01.",
                    required=True,
                    kind="date",
                ),
            ),
            build_changes,
        ),
    )
}


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"prompts:{offset}".encode()).decode().rstrip("=")


def _decode_cursor(cursor: object) -> int:
    if not isinstance(cursor, str):
        raise invalid("cursor must be a string")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, number = raw.partition(":")
        offset = int(number)
    except (ValueError, UnicodeDecodeError):
        raise invalid("invalid cursor") from None
    if prefix != "prompts" or not 0 <= offset < len(REGISTRY):
        raise invalid("invalid cursor")
    return offset


def list_page(ctx: Context, params: JsonObject) -> JsonObject:
    """``prompts/list``: one page of definitions."""
    cursor, page_size = params.get("cursor"), PAGE_SIZE
    start = 0 if cursor is None else _decode_cursor(cursor)
    listed = list(REGISTRY.values())
    page: JsonObject = {"prompts": [p.definition() for p in listed[start : start + page_size]]}
    if start + page_size < len(listed):
        page["nextCursor"] = _encode_cursor(start + page_size)
    return page


def get(ctx: Context, params: JsonObject) -> JsonObject:
    """``prompts/get``: the prompt's messages for these arguments."""
    name = params.get("name")
    if not isinstance(name, str):
        raise invalid("prompts/get needs params.name (a string)")
    prompt = REGISTRY.get(name)
    if prompt is None:
        raise invalid(f"Unknown prompt: {name[:128]}", {"prompts": list(REGISTRY)})
    description, messages = prompt.build(ctx, _arguments(prompt, params.get("arguments")))
    return {"description": description, "messages": messages}


def _arguments(prompt: Prompt, given: object) -> JsonObject:
    """The given arguments, checked: strings, known, required ones present."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise invalid("params.arguments must be an object of strings")
    known = tuple(a.name for a in prompt.arguments)
    for key, value in given.items():
        if key not in known:
            raise invalid(f"prompt {prompt.name} has no argument {key[:128]!r} (it takes {', '.join(known)})")
        if not isinstance(value, str) or len(value) > MAX_ARGUMENT_CHARS:
            raise invalid(f"argument {key} must be a string of at most {MAX_ARGUMENT_CHARS} characters")
    missing = [a.name for a in prompt.arguments if a.required and not given.get(a.name, "").strip()]
    if missing:
        raise invalid(f"prompt {prompt.name} needs the argument {', '.join(missing)}")
    return {key: value.strip() for key, value in given.items()}


METHODS: dict[str, Callable[[Context, JsonObject], JsonObject]] = {
    "prompts/list": list_page,
    "prompts/get": get,
}
