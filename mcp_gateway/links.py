"""``resource_link`` content items: each search hit and ask citation as a resource.

Appended after the text item of ``dir2mcp.search`` and ``dir2mcp.ask``
results (``structuredContent`` is untouched). Each link's URI is the slice
URI of ``corpus/uris.py``, so ``resources/read`` of it returns exactly the
cited lines, page or time range.
"""

from __future__ import annotations

from corpus import uris
from kernel.jsontypes import JsonObject
from mcp_gateway.summaries import cite, span_ref

DESCRIPTION_CHARS = 200


def resource_link(item: JsonObject) -> JsonObject:
    """The link of a hit or citation (``rel_path``, ``span``, optional ``snippet``)."""
    rel_path, ref = item["rel_path"], span_ref(item.get("span"))
    link = {
        "type": "resource_link",
        "uri": uris.slice_uri(rel_path, ref) if ref else uris.file_uri(rel_path),
        "name": rel_path.rsplit("/", 1)[-1],
        "title": cite(rel_path, item.get("span")),
    }
    if ref:  # a slice always reads as text; a whole file may be bytes
        link["mimeType"] = "text/plain"
    snippet = " ".join((item.get("snippet") or "").split())
    if snippet:
        cut = len(snippet) > DESCRIPTION_CHARS
        link["description"] = snippet[: DESCRIPTION_CHARS - 1] + "…" if cut else snippet
    return link


def search_links(result: JsonObject) -> tuple[JsonObject, list[JsonObject]]:
    """``Tool.split_content`` of search: the result as it is, and a link per hit."""
    return result, [resource_link(hit) for hit in result["hits"]]


def ask_links(result: JsonObject) -> tuple[JsonObject, list[JsonObject]]:
    """``Tool.split_content`` of ask: the result as it is, and a link per citation."""
    return result, [resource_link(citation) for citation in result["citations"]]
