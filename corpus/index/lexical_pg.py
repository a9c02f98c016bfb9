"""The lexical index on PostgreSQL: a tsvector per live chunk, under GIN.

Each chunk is indexed as the tokens of the shared splitter
(``words.tokens``: every identifier whole and in its parts), with
diacritics folded as FTS5's ``remove_diacritics`` does, each stemmed by the
Porter stemmer, the one FTS5 uses (PyStemmer's ``porter``), and no stop
words, as in FTS5. The tsvector is built here and handed to PostgreSQL
by binary COPY, sorted as the server keeps it: its own parser and stemmer
were three quarters of the database's work in writing a chunk, and the
tsvector literal's parsing and sorting a sixth of what was left
(docs/benchmarks.md, "Scale-out").
Query terms go through the same splitter and stemmer and reach PostgreSQL
as a quoted ``tsquery`` literal, so no input forms query syntax.

A lexeme's positions are ``1..n`` for its ``n`` occurrences (at most 256,
PostgreSQL's limit): ``ts_rank`` with length normalisation (flag 1) then
ranks by term frequency and chunk length, as BM25 does, with no proximity
term. Occurrences in a code chunk's head (``words.head_and_body``: its
context and first line) come first and carry weight A, the rest weight D, and
``ts_rank`` counts an A as ``words.HEAD_WEIGHT`` Ds, as FTS5's column weight
does. The tiers (every term, then some) are the same as SQLite's; the order
within a tier can differ.
"""

from __future__ import annotations

import functools
import struct
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from itertools import chain

import Stemmer
from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from corpus.index.tables import LIVE, TO_DOCUMENT, Row, SqlParams, TableBackend, batches, scored
from corpus.index.words import COMPOUND, HEAD_WEIGHT, head_and_body, parts, piece_tokens

TABLE = "chunks_lexical"
CREATE_SQL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (chunk_id bigint PRIMARY KEY, body tsvector NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_body ON {TABLE} USING gin (body)",
)
#: PostgreSQL keeps at most 256 positions per lexeme and lexemes under 2 KB.
MAX_POSITIONS = 256
MAX_LEXEME_BYTES = 2046
#: COPY's binary format (the PostgreSQL manual, "COPY", "Binary Format"):
#: the signature, no flags, no header extension; the end of the data.
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_TRAILER = b"\xff\xff"
_ROW = struct.Struct(">hiqi")  # two fields: an 8-byte chunk_id, then the tsvector's length
_COUNT = struct.Struct(">i")
#: After a lexeme in tsvectorsend's format: its number of positions, then
#: each (weight D, so the bare position): 1..n for its n occurrences.
_TAILS = [struct.pack(f">H{n}H", n, *range(1, n + 1)) for n in range(MAX_POSITIONS + 1)]
#: A position of weight A: the weight is a position's top two bits (3 = A).
_WEIGHT_A = 3 << 14
#: ``ts_rank``'s weights of D, C, B and A: an A occurrence (the head) counts
#: HEAD_WEIGHT times a D (the body), as FTS5's column weight does.
RANK_WEIGHTS = f"{{0.1, 0.2, 0.4, {0.1 * HEAD_WEIGHT:g}}}"


def fold(text: str) -> str:
    """Diacritics removed: "café" -> "cafe"."""
    if text.isascii():  # most code and much prose: nothing to fold
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


# A PyStemmer object is not safe to share between threads: one per thread.
# Its own cache is off (0): ``stem`` and ``document`` memoise, and that
# cache was slower than stemming again.
_stemmers = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        stemmer = _stemmers.porter = Stemmer.Stemmer("porter", 0)
    return stemmer


def _storable(stemmed: str) -> str:
    """The lexeme, or "" for one PostgreSQL cannot store."""
    if len(stemmed) * 4 > MAX_LEXEME_BYTES and len(stemmed.encode()) > MAX_LEXEME_BYTES:
        return ""
    return stemmed


@functools.lru_cache(maxsize=200_000)
def stem(token: str) -> str:
    """The lexeme of one lower-cased token: folded, stemmed; "" for one
    PostgreSQL cannot store."""
    return _storable(_stemmer().stemWord(fold(token)))


def lexeme(token: str) -> str:
    """The quoted tsquery lexeme of one token ("" if it has none)."""
    word = stem(token)
    if "'" in word or "\\" in word:
        word = word.replace("\\", "\\\\").replace("'", "''")
    return f"'{word}'" if word else ""


# What ``document`` has learnt: each compound's entries, and each piece's
# (most new compounds are pieces seen before: "self.x", "self.y"). Plain
# dicts, which map() reads in C, faster than lru_cache; a process's first
# sight of each compound, a third of this module's work, is learnt a
# chunk's worth at a time, the stemming in one call. Past CACHE_LIMIT
# entries a dict is replaced by an empty one (a thread still reading the
# old one keeps it).
CACHE_LIMIT = 200_000
_compounds: dict[str, tuple[bytes, ...]] = {}
_pieces: dict[str, tuple[bytes, ...]] = {}


def document(text: str, head: str = "") -> bytes:
    """What is indexed for a chunk: its tsvector in binary form (as
    ``tsvectorsend`` writes it), each lexeme with one position per
    occurrence, in PostgreSQL's order, so the server neither parses nor
    sorts it; the occurrences in ``head`` first, of weight A."""
    counts = _counts(text)
    tails, top = _TAILS, MAX_POSITIONS
    if not head:
        entries = [entry + tails[n if n <= top else top] for entry, n in sorted(counts.items())]
        return _COUNT.pack(len(entries)) + b"".join(entries)
    in_head = _counts(head)
    counts.update(in_head)
    entries = []
    for entry, n in sorted(counts.items()):
        first = in_head.get(entry, 0)
        if not first:
            entries.append(entry + tails[n if n <= top else top])
            continue
        n, first = min(n, top), min(first, top)
        weighted = [_WEIGHT_A | p for p in range(1, first + 1)] + list(range(first + 1, n + 1))
        entries.append(entry + struct.pack(f">H{n}H", n, *weighted))
    return _COUNT.pack(len(entries)) + b"".join(entries)


def _counts(text: str) -> Counter[bytes]:
    """Each lexeme entry of ``text`` with its number of occurrences."""
    compounds = COMPOUND.findall(text)
    known = _compounds if len(_compounds) < CACHE_LIMIT > len(_pieces) else _forget()
    new = [compound for compound in dict.fromkeys(compounds) if compound not in known]
    if new:
        _learn(new, known)
    # map, chain and Counter keep the per-token work in C
    return Counter(chain.from_iterable(map(known.__getitem__, compounds)))


def _forget() -> dict[str, tuple[bytes, ...]]:
    global _compounds, _pieces
    _compounds, _pieces = {}, {}
    return _compounds


def _learn(new: list[str], known: dict[str, tuple[bytes, ...]]) -> None:
    """Add these compounds' entries: the lexemes of ``lexical._expand``'s
    tokens, in its order, as tsvectorsend writes them (UTF-8, NUL-ended)."""
    split = [parts(compound) for compound in new]
    pieces = _pieces
    fresh = [p for p in dict.fromkeys(chain.from_iterable(ps for _, ps in split)) if p not in pieces]
    words = [piece_tokens(piece) for piece in fresh]
    encoded = iter(_encode_all([word for group in words for word in group]))
    for piece, group in zip(fresh, words, strict=True):
        pieces[piece] = tuple(filter(None, [next(encoded) for _ in group]))
    joined = [whole for whole, _ in split if whole]
    heads = dict(zip(joined, _encode_all(joined), strict=True))
    for compound, (whole, members) in zip(new, split, strict=True):
        if not whole and len(members) == 1:
            known[compound] = pieces[members[0]]
            continue
        head = (heads[whole],) if whole and heads[whole] else ()
        known[compound] = head + tuple(chain.from_iterable(map(pieces.__getitem__, members)))


def _encode_all(words: list[str]) -> list[bytes]:
    """Each word's entry (b"" when it has no lexeme), stemmed in one call."""
    stemmed = _stemmer().stemWords([fold(word) for word in words])
    return [word.encode() + b"\0" if word else b"" for word in map(_storable, stemmed)]


def tsquery(terms: Sequence[str], *, require_all: bool) -> str:
    """A tsquery literal of the terms' lexemes ("" when none is indexable)."""
    lexemes = dict.fromkeys(filter(None, map(lexeme, terms)))
    return (" & " if require_all else " | ").join(lexemes)


def create(cursor: CursorWrapper) -> None:
    for statement in CREATE_SQL:
        cursor.execute(statement)


def copy_rows(cursor: CursorWrapper, rows: Sequence[Row]) -> None:
    """Index rows of chunks the table does not hold (new ids, or ids just
    deleted in this transaction) by binary COPY. ``rows`` must be in memory:
    the COPY holds the connection."""
    raw = getattr(cursor, "cursor", cursor)  # psycopg's own, under Django's wrapper
    pack = _ROW.pack
    data = [_SIGNATURE]
    for chunk_id, context, text, kind in rows:
        head, rest = head_and_body(context, text, kind)
        body = document(rest, head)
        data += (pack(2, 8, chunk_id, len(body)), body)
    data.append(_TRAILER)
    # Errors as Django's, as from any other statement: COPY bypasses its wrapper.
    errors_as_django = getattr(cursor, "db", connection).wrap_database_errors
    with errors_as_django, raw.copy(f"COPY {TABLE} (chunk_id, body) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(b"".join(data))


def reindex_all(cursor: CursorWrapper, rows: Iterable[Row]) -> None:
    """Empty the table and index these (chunk_id, context, text, index_kind) rows (migrations:
    every live chunk, after a change to what is indexed)."""
    create(cursor)
    cursor.execute(f"DELETE FROM {TABLE}")
    # In batches: a COPY holds the connection, so the rows (a server-side
    # cursor on the same connection) are read between COPYs, not during one.
    for batch in batches(rows):
        copy_rows(cursor, batch)


class PostgresFTS(TableBackend):
    TABLE = TABLE
    ID_COLUMN = "chunk_id"

    def create(self, cursor: CursorWrapper) -> None:
        create(cursor)

    def replace(self, rows: list[Row]) -> None:
        latest = {row[0]: row for row in rows}  # one row per id
        if not latest:
            return
        with transaction.atomic():  # the delete and the COPY are one change
            self.delete(list(latest))
            self.insert(list(latest.values()))

    def insert(self, rows: list[Row]) -> None:
        with connection.cursor() as cursor:
            copy_rows(cursor, rows)

    def delete(self, chunk_ids: list[int]) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE chunk_id = ANY(%s)", [list(chunk_ids)])

    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: SqlParams
    ) -> list[tuple[int, float]]:
        query = tsquery(terms, require_all=require_all)
        if not query:
            return []
        extra = f"AND ({filter_sql})" if filter_sql else ""
        sql = (
            "WITH q AS (SELECT %s::tsquery AS query) "
            f"SELECT c.chunk_id, ts_rank('{RANK_WEIGHTS}', l.body, q.query, 1) AS score FROM q, {TABLE} l "
            f"JOIN chunks c ON c.chunk_id = l.chunk_id {TO_DOCUMENT} "
            f"WHERE l.body @@ q.query AND {LIVE} {extra} "
            "ORDER BY score DESC, c.chunk_id LIMIT %s"
        )
        return scored(sql, [query, *params, limit])
