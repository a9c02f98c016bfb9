"""The lexical index: BM25 over chunks with identifier-aware tokens.

Each live chunk has one row (rowid = ``chunk_id``) holding its text followed
by the sub-words of its compound identifiers, so ``parseConfigFile`` is found
by "parse config file" and ``os.path.join`` by "path join". Queries go
through the same splitter and reach the engine only as quoted tokens, so no
user input can form query syntax.

On SQLite this is a regular FTS5 table. A contentless table would not store
the text twice, but it can only delete a row given the exact text it
indexed, tying every delete to the splitter that wrote the row, and SQLite
3.40 predates ``contentless_delete``. PostgreSQL has a tsvector table
(``lexical_pg.py``); other databases get a backend that indexes nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from operator import itemgetter
from typing import Protocol

from django.db import connection, transaction

from corpus.models import Chunk, with_context

TABLE = "chunks_fts"
CREATE_SQL = (
    f"CREATE VIRTUAL TABLE IF NOT EXISTS {TABLE} "
    "USING fts5(body, tokenize = 'porter unicode61 remove_diacritics 2')"
)
MAX_QUERY_TERMS = 32
#: English function words a long question's BM25 ranking may leave out
STOP_WORDS = frozenset(
    "a an and are as at be by for from has have if in into is it its of on or that the this to "
    "was were which with will can not no do does how what when where who why".split()
)
# Longer joined forms are URLs and blobs, not identifiers anyone types.
MAX_JOINED = 64
BATCH = 500
# The largest top-N window read before a filtered query falls back to a join.
FILTER_WINDOW = 4096

# An identifier with its connectors: snake_case, kebab-case, a.b.c, a/b.py, a::b.
COMPOUND = re.compile(r"\w+(?:[-./\\:]{1,3}\w+)*")
_PIECE = re.compile(r"[^\W_]+")
_ALL = itemgetter(0)  # of _expand's (all tokens, extra tokens)


# -- the splitter --------------------------------------------------------------


def tokens(text: str) -> list[str]:
    """The lower-cased search tokens of ``text`` in order.

    Each compound yields its joined form (``ospathjoin``), then each piece
    (``os``, ``path``, ``join``) followed by its camelCase and digit
    sub-words (``http``, ``server`` after ``httpserver``).
    """
    # map and chain keep the per-compound loop in C: this runs over every chunk
    return list(chain.from_iterable(map(_ALL, map(_expand, COMPOUND.findall(text)))))


def index_text(text: str) -> str:
    """What the index stores for a chunk: its text plus the extra sub-tokens
    of each distinct compound (once: the text itself carries the counts)."""
    extras = [token for compound in dict.fromkeys(COMPOUND.findall(text)) for token in _expand(compound)[1]]
    return f"{text}\n{' '.join(extras)}" if extras else text


# Code repeats the same identifiers endlessly; memoising their expansion
# made indexing the standard library's lexical rows about 5x faster.
@functools.lru_cache(maxsize=200_000)
def _expand(compound: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(all tokens, extra tokens) of one compound; extra tokens are the ones
    the engine would not find by itself."""
    joined, pieces = parts(compound)
    every: list[str] = [joined] if joined else []
    extra: list[str] = list(every)
    for piece in pieces:
        words = piece_tokens(piece)
        every += words
        extra += words[1:]
    return tuple(every), tuple(extra)


def parts(compound: str) -> tuple[str, list[str]]:
    """(its joined form, lower-cased, or "" if it has none; its pieces)."""
    if compound.isalnum():  # every character a piece character: one piece
        return "", [compound]
    pieces = _PIECE.findall(compound)
    if len(pieces) > 1:
        joined = "".join(pieces)
        if len(joined) <= MAX_JOINED and not joined.isdigit():
            return joined.lower(), pieces
    return "", pieces


# A new compound is mostly pieces seen before ("self.x", "self.y"): their
# splitting is memoised on its own, which made a process's first sight of
# each compound about a fifth cheaper.
@functools.lru_cache(maxsize=200_000)
def piece_tokens(piece: str) -> tuple[str, ...]:
    """One piece's tokens: the piece lower-cased, then its camelCase and
    digit sub-words if it has more than one."""
    subwords = _subwords(piece)
    if len(subwords) > 1:
        return (piece.lower(), *(word.lower() for word in subwords))
    return (piece.lower(),)


def _subwords(piece: str) -> list[str]:
    """Split at camelCase, acronym (``HTTPServer``) and letter/digit boundaries."""
    if piece.isdigit() or (piece.isalpha() and (piece.islower() or piece.isupper() or piece[1:].islower())):
        return [piece]
    if piece.isascii():
        return _ASCII_SUBWORDS.findall(piece)
    return _split_by_rule(piece)


#: ``_split_by_rule``'s cuts for an ASCII piece, in one pass in C: digit
#: runs; capitals before a capital that starts a lower-case word
#: (HTTP|Server); a word with its leading capitals; other capitals.
#: tests/test_lexical.py checks it against the rule on every string of up
#: to 7 characters over two letters of each case and two digits.
_ASCII_SUBWORDS = re.compile(r"[0-9]+|[A-Z]+(?=[A-Z][a-z]{2})|[A-Z]*[a-z]+|[A-Z]+")


def _split_by_rule(piece: str) -> list[str]:
    """Cut where a digit meets a non-digit, a lower-case letter meets a
    capital, and before a capital that follows a capital and starts two
    lower-case letters (any script's letters and digits)."""
    cuts = [0]
    for i in range(1, len(piece)):
        prev, cur = piece[i - 1], piece[i]
        if (
            prev.isdigit() != cur.isdigit()
            or (prev.islower() and cur.isupper())
            or (prev.isupper() and cur.isupper() and _is_lower_word(piece[i + 1 : i + 3]))
        ):
            cuts.append(i)
    return [piece[a:b] for a, b in zip(cuts, cuts[1:] + [len(piece)], strict=True)]


def _is_lower_word(text: str) -> bool:
    # Two lower-case letters: HTTPServer splits before S, URLs and IPv6 stay whole.
    return len(text) == 2 and text.isalpha() and text.islower()


def query_terms(query: str) -> list[str]:
    """Distinct query tokens, at most MAX_QUERY_TERMS, in query order."""
    return list(dict.fromkeys(tokens(query)))[:MAX_QUERY_TERMS]


# -- the public API --------------------------------------------------------------


def index_chunks(rows: Iterable[tuple[int, str]], *, new: bool = False) -> None:
    """Add or replace the rows of these (chunk_id, text) pairs; ``new`` says
    the ids were just created, so there is nothing to replace."""
    backend = _backend()
    write = backend.insert if new else backend.replace
    for batch in batches(rows):
        write(batch)


def remove_chunks(chunk_ids: Iterable[int]) -> None:
    backend = _backend()
    for batch in batches(chunk_ids):
        backend.delete(batch)


def search(
    query: str, *, limit: int, chunk_filter_sql: str = "", params: Sequence = ()
) -> list[tuple[int, float]]:
    """Live chunks matching ``query`` as (chunk_id, score), best first.

    Chunks holding every query term come first, then chunks holding some;
    BM25 orders each tier. ``score`` is ``-bm25`` (higher is better) within a
    tier. ``chunk_filter_sql`` is an extra predicate over ``c`` (chunks),
    ``r`` (representations) and ``d`` (documents), applied before the limit;
    its placeholders are ``%s`` (``?`` also works on SQLite).
    """
    return search_tiers(query, limit=limit, chunk_filter_sql=chunk_filter_sql, params=params)[0]


def search_tiers(
    query: str,
    *,
    limit: int,
    chunk_filter_sql: str = "",
    params: Sequence = (),
    all_first_max: int = 0,
    drop_stop_words: bool = False,
) -> tuple[list[tuple[int, float]], int]:
    """:func:`search`'s hits, and how many of them hold every query term.

    With ``all_first_max``, a query of more terms than that is ranked by BM25
    alone (a long question's every word is rarely in one unit, and the
    all-terms tier then ranks whatever happens to hold them all first); the
    count of hits holding every term is still given."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return [], 0
    backend = _backend()
    hits = backend.query(terms, require_all=True, limit=limit, filter_sql=chunk_filter_sql, params=params)
    full = len(hits)
    if all_first_max and len(terms) > all_first_max:
        content = [term for term in terms if term not in STOP_WORDS] if drop_stop_words else terms
        ranked = backend.query(
            content or terms, require_all=False, limit=limit, filter_sql=chunk_filter_sql, params=params
        )
        return ranked, full
    if len(terms) == 1 or len(hits) >= limit:
        return hits, full
    seen = {chunk_id for chunk_id, _ in hits}
    more = backend.query(
        terms, require_all=False, limit=limit + len(hits), filter_sql=chunk_filter_sql, params=params
    )
    hits.extend(hit for hit in more if hit[0] not in seen)
    return hits[:limit], full


def rebuild() -> int:
    """Repopulate the index from every live chunk; returns the row count."""
    return _backend().rebuild()


def clear() -> None:
    _backend().clear()


def live_count() -> int:
    """Rows in the index; equals the number of live chunks when in sync."""
    return _backend().count()


def indexed_ids() -> set[int]:
    """The chunk ids the index holds (for consistency checks)."""
    return _backend().ids()


def refill(backend: Backend, recreate) -> int:
    """Empty the index (``recreate(cursor)``) and write every live chunk into
    it, in one transaction; returns the row count. Shared by the backends."""
    live = Chunk.objects.filter(deleted=False).values_list("chunk_id", "context", "text")
    rows = ((cid, with_context(context, text)) for cid, context, text in live.iterator(chunk_size=BATCH))
    count = 0
    with transaction.atomic():
        with connection.cursor() as cursor:
            recreate(cursor)
        for batch in batches(rows):
            backend.insert(batch)
            count += len(batch)
    return count


def batches(items: Iterable) -> Iterator[list]:
    iterator = iter(items)
    while batch := list(islice(iterator, BATCH)):
        yield batch


# -- backends ----------------------------------------------------------------------


class Backend(Protocol):
    def replace(self, rows: list[tuple[int, str]]) -> None: ...
    def insert(self, rows: list[tuple[int, str]]) -> None: ...
    def delete(self, chunk_ids: list[int]) -> None: ...
    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: Sequence
    ) -> list[tuple[int, float]]: ...
    def rebuild(self) -> int: ...
    def clear(self) -> None: ...
    def count(self) -> int: ...
    def ids(self) -> set[int]: ...


class TableBackend:
    """What both backends do alike, each over its own table: ``TABLE``, keyed
    by ``ID_COLUMN`` (the chunk id), made by ``create(cursor)``."""

    TABLE: str
    ID_COLUMN: str

    def create(self, cursor) -> None:
        raise NotImplementedError

    def rebuild(self) -> int:
        def recreate(cursor) -> None:
            self.create(cursor)
            cursor.execute(f"DELETE FROM {self.TABLE}")

        return refill(self, recreate)

    def clear(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {self.TABLE}")

    def count(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {self.TABLE}")
            return cursor.fetchone()[0]

    def ids(self) -> set[int]:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {self.ID_COLUMN} FROM {self.TABLE}")
            return {row[0] for row in cursor.fetchall()}


class SQLiteFTS5(TableBackend):
    """FTS5 with the unicode61 tokenizer, which folds case and diacritics,
    under the Porter stemmer, so "uploads" and "capped" match "upload cap"."""

    TABLE = TABLE
    ID_COLUMN = "rowid"

    def create(self, cursor) -> None:
        cursor.execute(CREATE_SQL)

    def replace(self, rows: list[tuple[int, str]]) -> None:
        self.delete([chunk_id for chunk_id, _ in rows])
        self.insert(rows)

    def insert(self, rows: list[tuple[int, str]]) -> None:
        with connection.cursor() as cursor:
            cursor.executemany(
                f"INSERT INTO {TABLE}(rowid, body) VALUES (%s, %s)",
                [(chunk_id, index_text(text)) for chunk_id, text in rows],
            )

    def delete(self, chunk_ids: list[int]) -> None:
        marks = ", ".join(["%s"] * len(chunk_ids))
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE rowid IN ({marks})", chunk_ids)

    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: Sequence
    ) -> list[tuple[int, float]]:
        # Tokens hold only letters and digits; quoting still makes any
        # character a literal, so MATCH never sees an operator.
        joiner = " AND " if require_all else " OR "
        match = joiner.join('"' + term.replace('"', '""') + '"' for term in terms)
        return self._top(match, limit, filter_sql, params)

    def _top(self, match: str, limit: int, filter_sql: str, params: Sequence) -> list[tuple[int, float]]:
        """FTS5's own top-N by rank, then liveness and the filter checked on
        just those rows; when too few pass, a window four times larger is
        read. Tombstones are deleted from the table, so liveness rarely drops
        a row. Joining the filter into the MATCH query instead makes SQLite
        rank every matching row through the join, several times slower at
        10k chunks (docs/benchmarks.md); a filter so selective that the
        window outgrows :data:`FILTER_WINDOW` falls back to that join."""
        window = limit
        while True:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT rowid, rank FROM {TABLE} WHERE {TABLE} MATCH %s ORDER BY rank, rowid LIMIT %s",
                    [match, window],
                )
                rows = cursor.fetchall()
                live = _live_ids([rowid for rowid, _ in rows], cursor, filter_sql, params)
            hits = [(rowid, -rank) for rowid, rank in rows if rowid in live]
            if len(hits) >= limit or len(rows) < window:
                return hits[:limit]
            if filter_sql and window >= FILTER_WINDOW:
                return self._joined(match, limit, filter_sql, params)
            window *= 4

    def _joined(self, match: str, limit: int, filter_sql: str, params: Sequence) -> list[tuple[int, float]]:
        sql = (
            f"SELECT c.chunk_id, bm25({TABLE}) AS bm25_score FROM {TABLE} "
            f"JOIN chunks c ON c.chunk_id = {TABLE}.rowid "
            "JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            f"WHERE {TABLE} MATCH %s AND c.deleted = 0 AND d.deleted = 0 AND ({filter_sql}) "
            "ORDER BY bm25_score, c.chunk_id LIMIT %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, *params, limit])
            return [(chunk_id, -score) for chunk_id, score in cursor.fetchall()]


def _live_ids(chunk_ids: list[int], cursor, filter_sql: str = "", params: Sequence = ()) -> set[int]:
    """Those of ``chunk_ids`` that are live and pass ``filter_sql``."""
    if not chunk_ids:
        return set()
    marks = ", ".join(["%s"] * len(chunk_ids))
    extra = f" AND ({filter_sql})" if filter_sql else ""
    cursor.execute(
        "SELECT c.chunk_id FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
        "JOIN documents d ON d.doc_id = r.document_id "
        f"WHERE c.chunk_id IN ({marks}) AND c.deleted = 0 AND d.deleted = 0{extra}",
        [*chunk_ids, *params],
    )
    return {row[0] for row in cursor.fetchall()}


class Unavailable:
    """Databases without a lexical backend yet: nothing indexed, nothing found."""

    def replace(self, rows: list[tuple[int, str]]) -> None:
        pass

    def insert(self, rows: list[tuple[int, str]]) -> None:
        pass

    def delete(self, chunk_ids: list[int]) -> None:
        pass

    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: Sequence
    ) -> list[tuple[int, float]]:
        return []

    def rebuild(self) -> int:
        return 0

    def clear(self) -> None:
        pass

    def count(self) -> int:
        return 0

    def ids(self) -> set[int]:
        return set()


def _backend() -> Backend:
    if connection.vendor == "sqlite":
        return SQLiteFTS5()
    if connection.vendor == "postgresql":
        from corpus.index.lexical_pg import PostgresFTS

        return PostgresFTS()
    return Unavailable()
