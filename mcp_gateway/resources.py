"""MCP resources (2025-11-25): the corpus's live documents as ``dir2mcp:///`` URIs.

``resources/list`` pages through every readable live document by path
(``corpus.documents.PAGE_SIZE``, 100, a page; an opaque cursor); ``resources/read`` reads a
whole document (``corpus/documents.py``: text, marked pages or time ranges,
or base64 up to 1 MiB) or exactly the slice a citation names, through
``open_file`` itself; ``resources/templates/list`` gives the two URI
templates of ``corpus/uris.py``. Refusals are ``open_file``'s, with its code
in the error's ``data``.

:func:`list_page` and :func:`read` are plain functions over a
:class:`~mcp_gateway.context.Context`, for the REST mirror and for prompts
that embed a resource; they raise :class:`ResourceError`.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from corpus import cursors, documents, files, store_faults, uris
from corpus.citations import SpanRef
from corpus.navigation.tokens import CHARS_PER_TOKEN
from kernel import errors
from kernel.jsontypes import JsonObject
from mcp_gateway import budgets
from mcp_gateway.context import Context
from mcp_gateway.registry import Cancelled

log = logging.getLogger(__name__)

METHODS = frozenset({"resources/list", "resources/read", "resources/templates/list"})
#: The most text a slice URI returns (open_file's own ceiling).
SLICE_MAX_CHARS = 50000
#: The most text a whole document's read returns: a tool's default budget
#: (mcp_gateway/budgets.py), so a client that hands it to a model stays under its cap.
WHOLE_MAX_CHARS = budgets.DEFAULT_MAX_TOKENS * CHARS_PER_TOKEN
PAGE_MARK = re.compile(r"^--- page (\d+) ---$", re.M)
_MAX_CURSOR_CHARS = 8192

# The resource is not there for this client: the same codes open_file refuses with.
_NOT_FOUND = frozenset({errors.FILE_NOT_FOUND, errors.PATH_OUTSIDE_ROOT, errors.FORBIDDEN})
_INVALID = frozenset(
    {
        errors.MISSING_FIELD,
        errors.INVALID_FIELD,
        errors.INVALID_RANGE,
        errors.DOC_TYPE_UNSUPPORTED,
        errors.FILE_TOO_LARGE,
    }
)

TEMPLATES = [
    {
        "uriTemplate": uris.FILE_TEMPLATE,
        "name": "file",
        "title": "A file in the directory",
        "description": (
            "A whole file, named by its path under the root (each segment percent-encoded). Text files "
            "read as text; PDFs, scans and recordings as their extracted text, marked '--- page N ---' or "
            "'[mm:ss-mm:ss]'; other files as base64 up to 1 MiB. Excluded and secret-bearing files "
            "are refused."
        ),
    },
    {
        "uriTemplate": uris.SLICE_TEMPLATE,
        "name": "slice",
        "title": "A cited slice of a file",
        "description": (
            "Exactly what a citation names, as dir2mcp.open_file reads it: lines=A-B (1-based, inclusive), "
            "page=N (a PDF or scan page) or time=A-B (milliseconds of a recording). Each hit of "
            "dir2mcp.search and citation of dir2mcp.ask links one."
        ),
        "mimeType": "text/plain",
    },
]


class ResourceError(Exception):
    """A request for resources that fails: a JSON-RPC error code, a message,
    and ``data`` with the dir2mcp code (spec §14) and whether to retry."""

    def __init__(self, rpc_code: int, message: str, data: JsonObject) -> None:
        super().__init__(message)
        self.rpc_code, self.message, self.data = rpc_code, message, data

    @classmethod
    def of(cls, exc: errors.Dir2mcpError, uri: str | None = None) -> ResourceError:
        if exc.code in _NOT_FOUND:
            rpc_code = errors.RPC_RESOURCE_NOT_FOUND
        else:
            rpc_code = errors.RPC_INVALID_PARAMS if exc.code in _INVALID else errors.RPC_INTERNAL_ERROR
        data = {"code": exc.code, "retryable": exc.retryable}
        return cls(rpc_code, exc.message, data | ({"uri": uri[:1000]} if uri is not None else {}))

    @property
    def code(self) -> str:
        code: str = self.data["code"]
        return code


def _invalid(message: str, code: str = errors.INVALID_FIELD, **data: object) -> ResourceError:
    return ResourceError(errors.RPC_INVALID_PARAMS, message, {"code": code, "retryable": False, **data})


def handle(method: str, params: JsonObject, ctx: Context, stop: threading.Event | None = None) -> JsonObject:
    """The result of one resources method; :class:`ResourceError` otherwise.
    ``stop`` set (the call's deadline passed), a read stops: :class:`Cancelled`."""
    try:
        if method == "resources/list":
            return list_page(ctx, _string(params, "cursor", required=False))
        if method == "resources/read":
            uri = _string(params, "uri", required=True)
            assert uri is not None  # required: _string raised otherwise
            return {"contents": read(ctx, uri, stop=stop)}
        if params.get("cursor") is not None:
            raise _invalid("invalid cursor: the templates fit one page")
        return {"resourceTemplates": TEMPLATES}
    except (ResourceError, Cancelled):
        raise
    except Exception as exc:  # a bug must not become a traceback on the wire
        fault = store_faults.classify(exc)  # a damaged database, a full disk: named, not a bug
        if fault is not None:
            raise ResourceError.of(fault) from None
        log.exception("%s failed", method)
        raise ResourceError(
            errors.RPC_INTERNAL_ERROR,
            f"{method} failed; see the server log",
            {"code": errors.INTERNAL_ERROR, "retryable": False},
        ) from None


def _string(params: JsonObject, name: str, *, required: bool) -> str | None:
    value = params.get(name)
    if value is None and not required:
        return None
    if value is None:
        raise _invalid(f"params.{name} is required", errors.MISSING_FIELD)
    if not isinstance(value, str) or not value:
        raise _invalid(f"params.{name} must be a non-empty string")
    return value


def refuse_if_sold(ctx: Context, tool_name: str, what: str = "file reads") -> None:
    """With x402 on, what the gate sells as a tool (``what``) is not given
    away by a method no payment reaches (a resource, a subscription)."""
    gate = getattr(ctx, "gate", None)
    if gate is not None and gate.price_for(tool_name) is not None:
        raise ResourceError(
            errors.RPC_INVALID_REQUEST,
            f"this server sells {what}: call the tool {tool_name} instead (x402)",
            {"code": errors.FORBIDDEN, "retryable": False},
        )


# -- resources/list ------------------------------------------------------------------


def _encode_cursor(after: str) -> str:
    return cursors.seal("resources", {"a": after})  # sealed: a client neither reads nor writes the path


def _decode_cursor(cursor: str) -> str:
    fields = cursors.opened("resources", cursor, _MAX_CURSOR_CHARS)
    after = None if fields is None else fields.get("a")
    if not isinstance(after, str) or not after:
        raise _invalid("invalid cursor")
    return after


def resource(listed: documents.Listed) -> JsonObject:
    """The MCP ``Resource`` of a :class:`corpus.documents.Listed`."""
    modified = datetime.fromtimestamp(listed.mtime_unix, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "uri": uris.file_uri(listed.rel_path),
        "name": listed.name,
        "title": listed.rel_path,
        "mimeType": listed.mime_type,
        "size": listed.size_bytes,
        "annotations": {"lastModified": modified},
    }


def list_page(ctx: Context, cursor: str | None = None) -> JsonObject:
    """One ``resources/list`` page: ``{"resources": [...], "nextCursor"?}``."""
    refuse_if_sold(ctx, "dir2mcp.list_files")
    after = _decode_cursor(cursor) if cursor is not None else ""
    page, more = documents.live_page(ctx.engine, after=after)
    out: JsonObject = {"resources": [resource(listed) for listed in page]}
    if more:
        out["nextCursor"] = _encode_cursor(page[-1].rel_path)
    return out


# -- resources/read ------------------------------------------------------------------


def read(ctx: Context, uri: str, *, stop: threading.Event | None = None) -> list[JsonObject]:
    """The ``contents`` of ``resources/read`` for ``uri``: one text or blob item."""
    refuse_if_sold(ctx, "dir2mcp.open_file")
    if len(uri) > uris.MAX_URI_CHARS:
        message = f"the URI is longer than {uris.MAX_URI_CHARS} characters"
        raise _invalid(message, uri=uri[:1000])
    try:
        rel_path, span = uris.parse(uri)
    except uris.BadUri as exc:
        # Another scheme names nothing here; a bad slice of ours is a bad parameter.
        rpc_code = (
            errors.RPC_INVALID_PARAMS
            if isinstance(uri, str) and uri.startswith(uris.PREFIX)
            else errors.RPC_RESOURCE_NOT_FOUND
        )
        data = {"code": errors.INVALID_FIELD, "retryable": False, "uri": str(uri)[:1000]}
        raise ResourceError(rpc_code, str(exc), data) from None
    # Answered by its one URI, however the request spelled it (corpus/uris.py); the
    # resolver refuses a path not in canonical form, so this names what was read.
    answered = uris.canonical(rel_path, span)
    try:
        return [
            _slice(ctx, answered, rel_path, span, _stopped_by(stop))
            if span is not None
            else _whole(ctx, answered, rel_path)
        ]
    except errors.Dir2mcpError as exc:
        raise ResourceError.of(exc, uri) from None


def _stopped_by(stop: threading.Event | None) -> Callable[[], None]:
    def check() -> None:
        if stop is not None and stop.is_set():
            raise Cancelled()

    return check


def _slice(ctx: Context, uri: str, rel_path: str, span: SpanRef, check: Callable[[], None]) -> JsonObject:
    """A cited slice; ``check`` is called as lines are read (a line far into
    a huge file kept a read going past its deadline until session 23)."""
    opened = files.open_file(
        ctx.engine, rel_path=rel_path, max_chars=SLICE_MAX_CHARS, check=check, **span.forms().fields
    )
    item = {"uri": uri, "mimeType": "text/plain", "text": opened["content"]}
    meta = {f"dir2mcp/{key}": True for key in ("truncated", "from_index") if opened.get(key)}
    return item | ({"_meta": meta} if meta else {})


def _whole(ctx: Context, uri: str, rel_path: str) -> JsonObject:
    whole = documents.read_whole(ctx.engine, rel_path)
    if whole.text is not None:
        return _bounded({"uri": uri, "mimeType": whole.mime_type, "text": whole.text}, rel_path, whole.lines)
    assert whole.data is not None  # read_whole gives the bytes when it gives no text
    # Bytes are what read_bytes sells: refused while it is priced, whatever
    # open_file costs (until session 27 only open_file's price was asked).
    refuse_if_sold(ctx, "dir2mcp.read_bytes")
    return {"uri": uri, "mimeType": whole.mime_type, "blob": base64.b64encode(whole.data).decode("ascii")}


def _bounded(item: JsonObject, rel_path: str, by_lines: bool) -> JsonObject:
    """A whole text over :data:`WHOLE_MAX_CHARS` cut after its last whole
    line that fits, and said so in ``_meta``: ``dir2mcp/truncated``, and
    ``dir2mcp/next``, the slice URI of the lines after the cut (a file read
    by lines), or of the page it cut (a document read by pages)."""
    text = item["text"]
    if len(text) <= WHOLE_MAX_CHARS:
        return item
    head = text[: text.rfind("\n", 0, WHOLE_MAX_CHARS) + 1] or text[:WHOLE_MAX_CHARS]
    meta: JsonObject = {"dir2mcp/truncated": True, "dir2mcp/total_chars": len(text)}
    if by_lines:
        shown = head.count("\n")
        total = text.count("\n") + (not text.endswith("\n"))
        meta["dir2mcp/next"] = uris.slice_uri(rel_path, SpanRef("lines", shown + 1, total))
    elif pages := PAGE_MARK.findall(head):
        meta["dir2mcp/next"] = uris.slice_uri(rel_path, SpanRef("page", int(pages[-1]), int(pages[-1])))
    return item | {"text": head, "_meta": meta}
