"""The chunk rows a search reads once it has ranked their ids: what a hit
shows and the lines of code units (the stored vectors are the dense
index's: ``dense/stored.py``). The SQL is written with the join and
liveness rule of ``tables.py`` (``TO_DOCUMENT``, ``LIVE``), as the lexical
backends' is."""

from __future__ import annotations

import json
from typing import NamedTuple

from django.db import connection

from corpus import slices
from corpus.citations import SpanRef
from corpus.index.tables import TO_DOCUMENT, one_of


class HitRow(NamedTuple):
    """What a search hit shows of its chunk."""

    text: str
    rep_type: str
    rel_path: str
    doc_type: str
    span: SpanRef
    label: str | None


# One round trip per search for what the ORM needed four queries for: on the
# hot path each saved query is ~0.3 ms of a ~15 ms search. Every id list
# below is one parameter (``tables.one_of``): a variable an id let a query's
# grow with the candidate pool, past SQLite's limit (session 31).
_HIT_SQL = (
    f"SELECT c.chunk_id, {slices.SQL_FIELDS}, r.rep_type, d.rel_path, d.doc_type, s.span_kind, s.start, "
    f's."end", s.extra_json FROM chunks c {TO_DOCUMENT} LEFT JOIN spans s ON s.chunk_id = c.chunk_id '
    "WHERE {among}"
)


def hit_rows(ids: list[int]) -> dict[int, HitRow]:
    """The row of each chunk of ``ids`` (live or not: the ranking checked that)."""
    if not ids:
        return {}
    rows: dict[int, HitRow] = {}
    with connection.cursor() as cursor:
        among, listed = one_of("c.chunk_id", ids)
        cursor.execute(_HIT_SQL.format(among=among), [listed])
        found = slices.texts(cursor.fetchall(), 1)
    for cid, text, rep_type, rel_path, doc_type, kind, start, end, extra in found:
        span = SpanRef(kind, start, end) if kind else SpanRef("lines", 1, 1)
        rows.setdefault(cid, HitRow(text, rep_type, rel_path, doc_type, span, _label(extra)))
    return rows


def chunk_paths(ids: list[int]) -> dict[int, str]:
    """The file each chunk of ``ids`` belongs to (live or not)."""
    if not ids:
        return {}
    with connection.cursor() as cursor:
        among, listed = one_of("c.chunk_id", ids)
        cursor.execute(f"SELECT c.chunk_id, d.rel_path FROM chunks c {TO_DOCUMENT} WHERE {among}", [listed])
        return dict(cursor.fetchall())


def _label(extra: object) -> str | None:
    """The span's human pointer; ``extra_json`` comes back as text or decoded, by backend."""
    if isinstance(extra, str | bytes):
        try:
            extra = json.loads(extra)
        except ValueError:
            return None
    label = extra.get("label") if isinstance(extra, dict) else None
    return label if isinstance(label, str) and label else None


def code_unit_lines(ids: list[int]) -> dict[int, int]:
    """How many lines each code unit of ``ids`` spans (chunks that are not code units are left out)."""
    if not ids:
        return {}
    among, listed = one_of("s.chunk_id", ids)
    with connection.cursor() as cursor:
        cursor.execute(
            'SELECT s.chunk_id, s."end" - s.start + 1 FROM spans s JOIN chunks c ON c.chunk_id = s.chunk_id '
            f"WHERE s.span_kind = %s AND c.index_kind = %s AND {among}",
            ["lines", "code", listed],
        )
        return dict(cursor.fetchall())
