"""The URIs by which MCP clients name the corpus: a file, or a slice of one.

``dir2mcp:///<rel_path>`` names a file by its path under the root (each
segment percent-encoded), and a query names a slice exactly as a citation
does: ``?lines=10-20``, ``?page=3`` or ``?time=65000-95000`` (milliseconds).

Why a scheme of our own rather than ``file://`` of the real path: the real
path says where the operator keeps the directory (a detail a remote client
has no business with, and which changes when the root moves), and a client
that sees ``file://`` may try to read the file itself, which fails on any
machine but the server's. The relative path is what every tool already
speaks, so the URI of a file never changes while the file exists.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from corpus.citations import SpanRef

SCHEME = "dir2mcp"
PREFIX = f"{SCHEME}:///"
#: RFC 6570 templates (``resources/templates/list``)
FILE_TEMPLATE = PREFIX + "{+path}"
SLICE_TEMPLATE = PREFIX + "{+path}{?lines,page,time}"

#: The longest URI ``resources/read`` takes (mcp_gateway/resources.py; its
#: REST mirror too): a path at corpus.security's bound, percent-encoded, and a slice.
MAX_URI_CHARS = 8192

_RANGE = re.compile(r"(\d{1,12})-(\d{1,12})")
_NUMBER = re.compile(r"\d{1,12}")


class BadUri(ValueError):
    """Not a URI of this server, or a slice it cannot name."""


def file_uri(rel_path: str) -> str:
    return PREFIX + quote(rel_path, safe="/")


def slice_uri(rel_path: str, span: SpanRef) -> str:
    """The URI a citation of ``span`` names."""
    return f"{file_uri(rel_path)}?{span.forms().query}"


def parse(uri: str) -> tuple[str, SpanRef | None]:
    """``(rel_path, span or None)`` of a ``dir2mcp:`` URI; :class:`BadUri` otherwise.

    Each path segment is percent-decoded once, by itself; one holding an
    encoded ``/`` (``%2F``) is passed on as sent, for the resolver to refuse
    as it refuses that in any path (``PATH_OUTSIDE_ROOT``). The decoded path
    is not checked here: containment, exclusion
    and canonical form (``./``, ``//``, a trailing ``/`` are refused) are
    the resolver's (``corpus.security``), as for every tool. A URI that
    spells a path's characters another way (``%41`` for ``A``, ``!`` for
    ``%21``, lower-case hex, ``lines=010-20``) names the same slice, and is
    answered as :func:`canonical` writes it.
    """
    if not isinstance(uri, str) or not uri.startswith(PREFIX):
        raise BadUri(f"not a {SCHEME} resource URI (expected {PREFIX}<path>)")
    # Split by hand: urlsplit drops tabs and newlines and strips spaces, so
    # it would read another spelling of the URI than the one sent.
    rest = uri[len(PREFIX) :]
    if "#" in rest:
        raise BadUri("a resource URI has no fragment")
    path, _, query = rest.partition("?")
    rel_path = "/".join(_decoded(segment) for segment in path.split("/"))
    if not rel_path or "\x00" in rel_path:
        raise BadUri("the URI names no file")
    return rel_path, _span(query)


def _decoded(segment: str) -> str:
    decoded = unquote(segment)
    return segment if "/" in decoded else decoded


def canonical(rel_path: str, span: SpanRef | None) -> str:
    """The one URI of ``rel_path`` (canonical) and ``span``: the one
    ``resources/read`` answers with, however the request spelled it."""
    return file_uri(rel_path) if span is None else slice_uri(rel_path, span)


def _span(query: str) -> SpanRef | None:
    if not query:
        return None
    key, sep, value = query.partition("=")
    if not sep or "&" in value:
        raise BadUri("a slice is one of lines=A-B, page=N or time=A-B")
    if key == "page" and _NUMBER.fullmatch(value) and int(value) >= 1:
        return SpanRef("page", int(value), int(value))
    match = _RANGE.fullmatch(value)
    if key in ("lines", "time") and match:
        start, end = int(match.group(1)), int(match.group(2))
        if end < start or (key == "lines" and start < 1):
            raise BadUri(f"{key}={value}: the range is empty")
        return SpanRef(key if key == "time" else "lines", start, end)
    raise BadUri("a slice is one of lines=A-B, page=N or time=A-B")
