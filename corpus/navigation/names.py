"""Where a name is defined (``dir2mcp.symbols``) and where it is used
(``dir2mcp.references``), read from the symbol index the indexer keeps
(corpus/navigation/symbols.py, corpus/ingest/writer.py).

Definitions come in tiers: the name as spelled, then the same name in
another case, then names it begins, then names it is part of; within a tier,
definitions before declarations and impl blocks, top-level ones before
members, then by path and line. A generated table of constants keeps no
names in the symbol index (corpus/ingest/generated.py), so after the exact
tier a name is looked for there: the full-text index finds the tables that
hold it, and a scan of those files finds its ``#define`` or enumerator
(``match: "generated"``). Uses come in index order, one file's lines
together, paged by a cursor. Each hit's line text (its signature or snippet)
is read from the document's indexed text, as search snippets are.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeGuard, TypeVar

from django.db.models import QuerySet

from corpus import cursors, slices
from corpus import rows as rows_of
from corpus.citations import SpanRef
from corpus.files import canonical_prefix, under_prefix
from corpus.index import lexical, words
from corpus.models import Chunk, Reference, Representation, RepType, Symbol, unpack_lines
from corpus.navigation import symbols
from kernel import errors
from kernel.jsontypes import JsonObject

#: the kinds a definition can have (corpus/navigation/outline.py)
KINDS = (
    "function",
    "method",
    "constructor",
    "macro",
    "class",
    "interface",
    "trait",
    "impl",
    "struct",
    "union",
    "enum",
    "record",
    "type",
    "module",
    "namespace",
    "constant",
    "static",
    "property",
    "field",
    "declaration",
)
#: the most hits one call returns
MAX_LIMIT = 500
#: rows read per tier before ranking, in files the rules let through: a name
#: defined more often than this is cut to it
TIER_ROWS = 2000
LINE_CHARS = 200
#: rows of files the rules exclude now (still in the index) one
#: ``references`` page passes over before it stops judging
PASSED_OVER = 1000
#: the longest cursor accepted (those given out are 123 characters)
MAX_CURSOR = 256
#: the most generated tables scanned for a name (their names are not in the symbol index)
GENERATED_FILES = 40
#: the full-text hits read to find them (the name's uses in other files among them)
GENERATED_CHUNKS = 200
#: the kinds a generated file's scan finds
_GENERATED_KINDS = ("macro", "constant")
_TIERS = ("exact", "case_insensitive", "prefix", "substring")  # "generated" after "exact"
# Sorted after the definitions of a name: what declares or extends it elsewhere.
_LATER_KINDS = frozenset({"declaration", "impl"})


def _fail(message: str) -> errors.Dir2mcpError:
    return errors.Dir2mcpError(errors.INVALID_FIELD, message)


def _name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail("name must be a non-empty string")
    if len(value) > symbols.MAX_NAME:  # the schema's maxLength, which the validator reports so
        raise errors.Dir2mcpError(errors.INVALID_RANGE, f"name is longer than {symbols.MAX_NAME} characters")
    return value.strip()


def _limit(value: object, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail("limit must be an integer")
    if not 1 <= value <= MAX_LIMIT:
        raise errors.Dir2mcpError(errors.INVALID_RANGE, f"limit must be from 1 to {MAX_LIMIT}")
    return value


# -- symbols --------------------------------------------------------------------------


def find_symbols(
    name: object,
    *,
    kind: str | None = None,
    path_prefix: str = "",
    limit: int | None = None,
    readable: Callable[[str], bool] = lambda rel_path: True,
) -> JsonObject:
    """Where ``name`` is defined, best first (the tiers above), in the files
    ``readable`` lets through (the rules as they are now)."""
    name, limit, prefix = _name(name), _limit(limit, 20), canonical_prefix(path_prefix)
    if kind not in (None, "") and kind not in KINDS:
        raise _fail(f"unknown kind {kind!r}; one of {', '.join(KINDS)}")
    lower = name.lower()
    rows = Symbol.objects.filter(document__deleted=False)
    if prefix:
        rows = rows.filter(under_prefix("document__rel_path", prefix))
    if kind:
        rows = rows.filter(kind=kind)
    tiers = (
        # name_lower first: its index finds the rows (the name has no index of its own)
        rows.filter(name_lower=lower, name=name),
        rows.filter(name_lower=lower).exclude(name=name),
        rows.filter(name_lower__startswith=lower).exclude(name_lower=lower),
        rows.filter(name_lower__contains=lower).exclude(name_lower__startswith=lower),
    )
    hits: list[JsonObject] = []
    cut = False
    judged = _Verdicts(readable)
    for tier, query in zip(_TIERS, tiers, strict=True):
        found, cut_here = _tier_rows(query, judged)
        cut = cut or cut_here
        found.sort(
            key=lambda r: (
                r["kind"] in _LATER_KINDS,
                r["enclosing"] != "",
                r["document__rel_path"],
                r["line"],
            )
        )
        hits.extend(dict(row, match=tier) for row in _first_readable(found, judged, limit + 1 - len(hits)))
        if tier == "exact" and len(hits) <= limit and kind in (None, "", *_GENERATED_KINDS):
            generated = _generated_definitions(name, prefix, kind)
            hits.extend(_first_readable(generated, judged, limit + 1 - len(hits)))
        if len(hits) > limit:
            break
    more = len(hits) > limit or cut
    hits = hits[:limit]
    texts = _line_texts({(hit["document_id"], hit["line"]) for hit in hits})
    out = [_symbol(hit, texts.get((hit["document_id"], hit["line"]), "")) for hit in hits]
    return {"name": name, "symbols": out, "count": len(out), "truncated": more}


_FIELDS = (
    "document_id",
    "document__rel_path",
    "name",
    "qualified",
    "kind",
    "line",
    "start",
    "end",
    "enclosing",
)


class _Verdicts:
    """``readable``, each path asked once in a call."""

    def __init__(self, readable: Callable[[str], bool]) -> None:
        self._readable = readable
        self._known: dict[str, bool] = {}

    def __call__(self, rel_path: str) -> bool:
        if rel_path not in self._known:
            self._known[rel_path] = self._readable(rel_path)
        return self._known[rel_path]


def _tier_rows(query: QuerySet[Symbol], readable: Callable[[str], bool]) -> tuple[list[JsonObject], bool]:
    """One tier's rows, and whether it was cut: every row when there are at
    most ``TIER_ROWS`` (judged later, only as far as the answer needs);
    else its first ``TIER_ROWS`` + 1 rows in files ``readable`` lets through
    (in row order), the rows of files the rules exclude now passed over as
    they are read, up to ``PASSED_OVER`` of them. Until session 28 the cap
    counted those too: a file excluded since the index was written took the
    places of readable definitions (999 of its rows cut ``qq_zebra`` from a
    tier of 2,002 rows), so what an answer held and ``truncated`` depended
    on it. Past ``PASSED_OVER`` such rows the tier is cut (``truncated``):
    what that tells is that more than 1,000 rows matching the name lie in
    excluded files, never one name."""
    ordered = query.order_by("pk").values("pk", *_FIELDS)
    found = list(ordered[: TIER_ROWS + 1])
    if len(found) <= TIER_ROWS:
        return found, False
    kept: list[JsonObject] = []
    passed_over = 0
    while found:
        for row in found:
            if not readable(str(row["document__rel_path"])):
                passed_over += 1
                if passed_over > PASSED_OVER:
                    return kept, True
                continue
            kept.append(row)
            if len(kept) > TIER_ROWS:
                return kept, True
        found = list(ordered.filter(pk__gt=found[-1]["pk"])[: TIER_ROWS + 1 - len(kept)])
    return kept, False


_Row = TypeVar("_Row", bound=Mapping[str, object])


def _first_readable(rows: Iterable[_Row], readable: Callable[[str], bool], wanted: int) -> list[_Row]:
    """The first ``wanted`` of ``rows`` in files ``readable`` lets through:
    judged only as far as the answer needs (about 50 us a path)."""
    kept: list[_Row] = []
    for row in rows:
        if len(kept) >= wanted:
            break
        if readable(str(row["document__rel_path"])):
            kept.append(row)
    return kept


def _generated_definitions(name: str, prefix: str, kind: str | None) -> list[JsonObject]:
    """Where generated tables of constants define ``name`` (rows shaped as
    :func:`find_symbols` reads them): a ``#define NAME`` (macro) or an
    enumerator line (constant), in the tables whose chunks the full-text
    index finds holding the name."""
    token = words.tokens(name)[:1]  # the whole name, joined: its rarest token
    if kind not in (None, "", *_GENERATED_KINDS) or not token:
        return []
    found = lexical.search(token[0], limit=GENERATED_CHUNKS)
    holding = Chunk.objects.filter(chunk_id__in=[chunk_id for chunk_id, _ in found])
    reps = Representation.objects.filter(
        rep_id__in=holding.values("representation_id"),
        meta_json__table_of_constants=True,
        deleted=False,
        document__deleted=False,
    )
    if prefix:
        reps = reps.filter(under_prefix("document__rel_path", prefix))
    documents = sorted(reps.values_list("document__rel_path", "document_id", "rep_id")[:GENERATED_FILES])
    texts = slices.representation_texts(rep_id for _, _, rep_id in documents)
    shape = _generated_shape(name)
    rows = []
    for rel_path, doc_id, rep_id in documents:
        for line, found_kind in _defining_lines(texts.get(rep_id, ""), name, shape):
            if kind and kind != found_kind:
                continue
            row = {"document_id": doc_id, "document__rel_path": rel_path, "name": name, "qualified": ""}
            row |= {"kind": found_kind, "line": line, "start": line, "end": line, "enclosing": ""}
            rows.append(row | {"match": "generated"})
    return rows


def _generated_shape(name: str) -> re.Pattern[str]:
    """A line defining ``name``: group 1 a ``#define NAME``; else an
    enumerator, ``NAME [= value][,] [comment]``."""
    word = re.escape(name)
    return re.compile(
        rf"[ \t]*(?:(#[ \t]*define[ \t]+{word}\b).*|{word}[ \t]*(?:=[^;{{}}]*)?,?[ \t]*(?:/[*/].*)?)"
    )


def _defining_lines(text: str, name: str, shape: re.Pattern[str]) -> list[tuple[int, str]]:
    """(1-based line, kind) of each line of ``text`` that defines ``name``,
    found from the name's occurrences (a register header is megabytes)."""
    out: list[tuple[int, str]] = []
    line, counted = 1, 0
    at = text.find(name)
    while at >= 0:
        start = text.rfind("\n", 0, at) + 1
        end = text.find("\n", at)
        end = len(text) if end < 0 else end
        match = shape.fullmatch(text, start, end)
        if match:
            line += text.count("\n", counted, start)
            counted = start
            out.append((line, "macro" if match.group(1) else "constant"))
        at = text.find(name, end)
    return out


def _symbol(row: JsonObject, signature: str) -> JsonObject:
    hit = {
        "rel_path": row["document__rel_path"],
        "name": row["name"],
        "kind": row["kind"],
        "span": SpanRef("lines", row["start"], row["end"]).as_dict(),
        "line": row["line"],
        "signature": signature,
        "match": row["match"],
    }
    if row["qualified"]:
        hit["qualified"] = row["qualified"]
    if row["enclosing"]:
        hit["enclosing"] = row["enclosing"]
    return hit


# -- references ---------------------------------------------------------------------


def find_references(
    name: object,
    *,
    path_prefix: str = "",
    limit: int | None = None,
    cursor: str | None = None,
    readable: Callable[[str], bool] = lambda rel_path: True,
) -> JsonObject:
    """Where ``name`` is used: a page of hits and, when there are more, a
    cursor; in the files ``readable`` lets through (the rules as they are now)."""
    name, limit, prefix = _name(name), _limit(limit, 50), canonical_prefix(path_prefix)
    # The cursor names its query by a digest: short whatever the prefix's length.
    # (the "2": a cursor of the layout before 0023, which named rows by id, is refused)
    key = hashlib.sha256(f"2\0{name}\0{prefix}".encode("utf-8", "surrogatepass")).hexdigest()[:16]
    after, skip = _resume(cursor, key) if cursor else (0, 0)
    rows = Reference.objects.filter(name__name=name, document__deleted=False, document_id__gte=after)
    if prefix:
        rows = rows.filter(under_prefix("document__rel_path", prefix))
    # A file has one row per name: the document's id places a row in the order.
    ordered = rows.order_by("document_id").values_list("document_id", "document__rel_path", "lines")
    hits: list[tuple[int, str, int]] = []
    resume: tuple[int, int] | None = None
    passed_over = 0
    # Rows are read until the page is full and a readable row follows it (the
    # cursor), or they end (none): until session 27 a row passed over still
    # handed a cursor on, to an empty page, and told of a file the rules
    # exclude now that uses the name. Judging stops past PASSED_OVER such
    # rows, with a cursor after the last.
    with rows_of.streamed(ordered, limit + 1) as found:
        for doc_id, rel_path, packed in found:
            if not readable(rel_path):
                passed_over += 1
                if passed_over > PASSED_OVER:
                    resume = (doc_id + 1, 0)
                    break
                continue
            lines = unpack_lines(bytes(packed))
            start = skip if doc_id == after else 0
            for index in range(start, len(lines)):
                if len(hits) == limit:
                    resume = (doc_id, index)
                    break
                hits.append((doc_id, rel_path, lines[index]))
            if resume is not None:
                break
    texts = _line_texts({(doc_id, line) for doc_id, _, line in hits})
    enclosing = _enclosing({doc_id for doc_id, _, _ in hits})
    out = []
    for doc_id, rel_path, line in hits:
        hit = {
            "rel_path": rel_path,
            "span": SpanRef("lines", line, line).as_dict(),
            "snippet": texts.get((doc_id, line), ""),
        }
        inside = _innermost(enclosing.get(doc_id, ()), line)
        if inside:
            hit["enclosing"] = inside
        out.append(hit)
    result = {"name": name, "references": out, "count": len(out)}
    return result | ({"next_cursor": _cursor(key, *resume)} if resume else {})


def _cursor(key: str, doc_id: int, skip: int) -> str:
    # Sealed: a document id a client could read counted the files indexed
    # between two readable ones, excluded ones among them (session 29).
    return cursors.seal("references", {"q": key, "r": doc_id, "k": skip})


def _resume(cursor: object, key: str) -> tuple[int, int]:
    """``(document id, k)``: resume at that document's row after its first k lines."""
    invalid = _fail("invalid cursor")
    data = cursors.opened("references", cursor, MAX_CURSOR)
    if data is None or data.get("q") != key:
        raise invalid
    row_id, skip = data.get("r"), data.get("k")
    if not (_count(row_id) and _count(skip)):
        raise invalid
    return row_id, skip


def _count(value: object) -> TypeGuard[int]:
    return not isinstance(value, bool) and isinstance(value, int) and value >= 0


def _enclosing(doc_ids: set[int]) -> dict[int, list[tuple[int, int, str]]]:
    """Each document's definitions as (start, end, name)."""
    found: dict[int, list[tuple[int, int, str]]] = {}
    rows = Symbol.objects.filter(document_id__in=doc_ids).values_list("document_id", "start", "end", "name")
    for doc_id, start, end, name in rows:
        found.setdefault(doc_id, []).append((start, end, name))
    return found


def _innermost(definitions: Iterable[tuple[int, int, str]], line: int) -> str:
    """The name of the innermost definition whose span holds ``line``."""
    best: tuple[int, int, str] | None = None
    for start, end, name in definitions:
        if start <= line <= end and (best is None or (start, -end) > (best[0], -best[1])):
            best = (start, end, name)
    return best[2] if best else ""


def _line_texts(wanted: set[tuple[int, int]]) -> dict[tuple[int, int], str]:
    """The text of these (document, line)s, stripped and cut, from the indexed text."""
    by_doc: dict[int, set[int]] = {}
    for doc_id, line in wanted:
        by_doc.setdefault(doc_id, set()).add(line)
    out: dict[tuple[int, int], str] = {}
    reps = Representation.objects.filter(
        document_id__in=by_doc, rep_type=RepType.RAW_TEXT, deleted=False
    ).values_list("document_id", "text")
    for doc_id, text in reps:
        lines = text.split("\n")
        for line in by_doc[doc_id]:
            if 0 < line <= len(lines):
                out[(doc_id, line)] = lines[line - 1].strip()[:LINE_CHARS]
    return out
