"""The lexical index: BM25 over chunks with identifier-aware tokens.

Each live chunk has one row (rowid = ``chunk_id``) holding its text followed
by the sub-words of its compound identifiers, so ``parseConfigFile`` is found
by "parse config file" and ``os.path.join`` by "path join". Queries go
through the same splitter and reach the engine only as quoted tokens, so no
user input can form query syntax.

A row has two columns (:func:`columns`): a code chunk's *head*, its context
(path, enclosing definitions) and its first line, where a unit names what it
defines, and the rest of its text (a prose chunk has it all in the second).
BM25 counts a term in the head ``words.HEAD_WEIGHT`` times: a sentence
describing ``show_syntax_error`` shares "syntax error" with that unit's
name, and a unit merely using such words in its body no longer outranks it
(docs/benchmarks.md, issue #36).

On SQLite this is a contentless FTS5 table (``content=''``): it keeps the
terms, their counts and positions, and no copy of the text, which the
``chunks`` table already holds (a regular table stored each chunk's text a
second time, about a third of ``meta.sqlite``; issue #37). SQLite 3.40
predates ``contentless_delete``, so a row is deleted by handing FTS5 the
exact columns it indexed, rebuilt from the chunk's stored ``context``,
``text`` and ``index_kind`` with the current splitter. Chunk text is never
rewritten in place (a changed unit is a new chunk; an old one is only
flagged ``deleted``), so the columns can always be rebuilt, and a change to
:func:`index_text` or :func:`columns` ships with a migration that rebuilds
the table (``SPLITTER_VERSION``; a test pins the splitter's output).
PostgreSQL has a tsvector table (``lexical_pg.py``); other databases get a
backend that indexes nothing.

On a big tree a common term (``lock``, ``device``) is held by hundreds of
thousands of rows, and FTS5 scores every row a ``MATCH`` enumerates before
it can sort. An any-term query therefore reads the rows holding its rare
terms first, scored with every term, and leaves unranked the rows holding
only common terms whose best possible share cannot reach the answer
(:meth:`SQLiteFTS5._pruned`: the same hits, docs/benchmarks.md, session 22).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper

from corpus import slices
from corpus.index.tables import (
    LIVE,
    TO_DOCUMENT,
    Backend,
    Row,
    SqlParams,
    TableBackend,
    batches,
    marks,
    one_of,
    scored,
)
from corpus.index.words import HEAD_WEIGHT, head_and_body, index_text, query_terms

TABLE = "chunks_fts"
#: Bumped, with a migration that rebuilds the table, whenever :func:`index_text`
#: or :func:`columns` changes what a row holds: contentless rows are deleted by
#: their exact columns. 2: the head column (0019_lexical_head). 3: the head
#: is the line after the comments that precede a definition (0020_lexical_head_after_comments).
SPLITTER_VERSION = 3


def create_sql(table: str = TABLE) -> str:
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} "
        "USING fts5(head, body, content = '', tokenize = 'porter unicode61 remove_diacritics 2')"
    )


def columns(context: str, text: str, kind: str) -> tuple[str, str]:
    """A chunk's two columns as the table stores them: its head (context and
    first line, for code) and the rest of its text (``words.head_and_body``),
    each through :func:`index_text`."""
    head, body = head_and_body(context, text, kind)
    return index_text(head), index_text(body)


#: English function words a long question's BM25 ranking may leave out
STOP_WORDS = frozenset(
    "a an and are as at be by for from has have if in into is it its of on or that the this to "
    "was were which with will can not no do does how what when where who why".split()
)
#: The ranking, BM25 with the head column counted HEAD_WEIGHT times: as
#: FTS5's ``rank`` (its own top-N) and as a function (in a join).
RANK = f"bm25({HEAD_WEIGHT}, 1.0)"
BM25 = f"bm25({TABLE}, {HEAD_WEIGHT}, 1.0)"
# The largest top-N window read before a filtered query falls back to a join.
FILTER_WINDOW = 4096
#: FTS5's bm25() parameters (k1; b is 0.75): a term adds less than
#: ``idf * (BM25_K1 + 1)`` to any row's score, however often the row holds it
BM25_K1 = 1.2
#: An any-term query whose commonest term is held by fewer rows than this
#: ranks every row holding a term: ranking them costs little
#: (:meth:`SQLiteFTS5._pruned`; about 1.3 µs a row on this project's machine)
PRUNE_ROWS = 20_000
#: A term is rare, for :meth:`SQLiteFTS5._pruned`'s first read, when at most
#: this share of the rows holding the query's commonest term hold it
RARE_SHARE = 0.125
#: FTS5 pages one step of :func:`compact` writes at most (one short transaction)
MERGE_PAGES = 200

# -- the public API --------------------------------------------------------------


def index_chunks(rows: Iterable[Row], *, new: bool = False) -> None:
    """Add or replace the rows of these (chunk_id, context, text, index_kind) chunks;
    ``new`` says the ids were just created, so there is nothing to replace."""
    backend = _backend()
    write = backend.insert if new else backend.replace
    for batch in batches(rows):
        write(batch)


#: What the identifier split adds to a row's head and body (:func:`row_tails`)
Tails = tuple[str, str]


def row_tails(rows: Iterable[tuple[str, str, str]]) -> list[Tails] | None:
    """What this database's index row holds after the head and the body of
    each (context, text, index_kind) chunk (the identifier split's extra
    words: :func:`columns`), worked out where the texts are cut (a preparing
    worker: corpus/ingest/prepare_pool.py) so that the writing process only
    writes them (:func:`index_new_chunks`); None where the backend keeps the
    text as it is."""
    if connection.vendor != "sqlite":
        return None
    tails: list[Tails] = []
    for context, text, kind in rows:
        head, body = head_and_body(context, text, kind)
        head_row, body_row = index_text(head), index_text(body)
        if not (head_row.startswith(head) and body_row.startswith(body)):  # the writer works the row out
            return None
        tails.append((head_row[len(head) :], body_row[len(body) :]))
    return tails


def index_new_chunks(rows: Iterable[tuple[Row, Tails | None]]) -> None:
    """:func:`index_chunks` of chunks just created, each a (chunk_id,
    context, text, index_kind) row with the tails :func:`row_tails` gave for
    it, or None to work them out here."""
    backend = _backend()
    for batch in batches(rows):
        _insert_with_tails(backend, batch)


def reindex_chunks(rows: Iterable[tuple[Row, Tails | None]]) -> None:
    """:func:`index_new_chunks` of chunks the table may hold already (a
    tombstoned chunk brought back): a row held is replaced."""
    backend = _backend()
    for batch in batches(rows):
        backend.delete([row[0] for row, _ in batch])
        _insert_with_tails(backend, batch)


def _insert_with_tails(backend: Backend, batch: Sequence[tuple[Row, Tails | None]]) -> None:
    """Insert one batch of rows with their tails (where the backend takes them)."""
    if isinstance(backend, SQLiteFTS5):
        backend.insert_columns([_with_tails(row, tails) for row, tails in batch])
    else:
        backend.insert([row for row, _ in batch])


def _with_tails(row: Row, tails: Tails | None) -> tuple[int, str, str]:
    chunk_id, context, text, kind = row
    if tails is None:
        return (chunk_id, *columns(context, text, kind))
    head, body = head_and_body(context, text, kind)
    return chunk_id, head + tails[0], body + tails[1]


def remove_chunks(chunk_ids: Iterable[int]) -> None:
    backend = _backend()
    for batch in batches(chunk_ids):
        backend.delete(batch)


def search(
    query: str, *, limit: int, chunk_filter_sql: str = "", params: SqlParams = ()
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
    params: SqlParams = (),
    all_first_max: int = 0,
    drop_stop_words: bool = False,
) -> tuple[list[tuple[int, float]], tuple[int, ...]]:
    """:func:`search`'s hits, and the units holding every query term (at
    most ``limit``; with a short query, the first hits).

    With ``all_first_max``, a query of more terms than that is ranked by BM25
    alone (a long question's every word is rarely in one unit, and the
    all-terms tier then ranks whatever happens to hold them all first); the
    units holding every term are still given, in the order they are stored,
    and need not be among the hits. They are units, not a count: a reader
    judges them against the rules as they are now (corpus/retrieval.py:
    ``match`` is judged over the readable ones alone; a count over the whole
    index told of the words of a file excluded since it was indexed,
    session 28).

    The answer for a smaller ``limit`` is the first hits of a larger one
    (each tier is a total order: BM25, then chunk id), so an answer given
    lately for the same query on an unchanged database serves it
    (:class:`Remembered`): a search asks again for the name a one-identifier
    query defines (corpus/retrieval.py, ``_defining``)."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return [], ()
    key = (query, chunk_filter_sql, tuple(params), all_first_max, drop_stop_words)
    known = _REMEMBERED.get(key, limit)
    if known is not None:
        return known
    hits, full = _tiers(terms, limit, chunk_filter_sql, params, all_first_max, drop_stop_words)
    _REMEMBERED.put(key, limit, hits, full)
    return hits, full


def _tiers(
    terms: list[str],
    limit: int,
    filter_sql: str,
    params: SqlParams,
    all_first_max: int,
    drop_stop_words: bool,
) -> tuple[list[tuple[int, float]], tuple[int, ...]]:
    backend = _backend()
    if all_first_max and len(terms) > all_first_max:
        # only the units holding every term are wanted: no ranking of them
        full = _full(backend, terms, limit, filter_sql, params)
        content = [term for term in terms if term not in STOP_WORDS] if drop_stop_words else terms
        ranked = backend.query(
            content or terms, require_all=False, limit=limit, filter_sql=filter_sql, params=params
        )
        return ranked, full
    hits = backend.query(terms, require_all=True, limit=limit, filter_sql=filter_sql, params=params)
    full = tuple(chunk_id for chunk_id, _ in hits)
    if len(terms) == 1 or len(hits) >= limit:
        return hits, full
    seen = {chunk_id for chunk_id, _ in hits}
    more = backend.query(
        terms, require_all=False, limit=limit + len(hits), filter_sql=filter_sql, params=params
    )
    hits.extend(hit for hit in more if hit[0] not in seen)
    return hits[:limit], full


def full_ids(
    query: str, *, limit: int, chunk_filter_sql: str = "", params: SqlParams = ()
) -> tuple[int, ...]:
    """Live units passing ``chunk_filter_sql`` that hold every term of
    ``query``, at most ``limit``: on SQLite in the order they are stored,
    unranked (:meth:`SQLiteFTS5.all_ids`), elsewhere best first. A reader
    looking past units it may not see narrows the filter to other files."""
    terms = query_terms(query)
    if not terms or limit <= 0:
        return ()
    return _full(_backend(), terms, limit, chunk_filter_sql, params)


def _full(
    backend: Backend, terms: list[str], limit: int, filter_sql: str, params: SqlParams
) -> tuple[int, ...]:
    if isinstance(backend, SQLiteFTS5):
        return backend.all_ids(terms, limit=limit, filter_sql=filter_sql, params=params)
    every = backend.query(terms, require_all=True, limit=limit, filter_sql=filter_sql, params=params)
    return tuple(chunk_id for chunk_id, _ in every)


@dataclass(frozen=True)
class _Answer:
    #: the DB-API connection that read it, held so that no other connection
    #: can take its identity while the answer is kept
    raw: object
    version: tuple[int, int]
    limit: int
    hits: list[tuple[int, float]]
    full: tuple[int, ...]


class Remembered:
    """:func:`search_tiers`' latest answers (SQLite only), each kept while
    the database is unchanged: SQLite's ``data_version`` moves when another
    connection commits, the connection's ``total_changes`` when it writes
    itself, and an answer is served only to the connection that read it."""

    ENTRIES = 8

    def __init__(self) -> None:
        self._answers: OrderedDict[tuple[object, ...], _Answer] = OrderedDict()
        self._lock = threading.Lock()

    def get(
        self, key: tuple[object, ...], limit: int
    ) -> tuple[list[tuple[int, float]], tuple[int, ...]] | None:
        version = _version()
        if version is None:
            return None
        with self._lock:
            answer = self._answers.get(key)
        if answer is None or answer.raw is not connection.connection or answer.version != version:
            return None
        if limit <= answer.limit:
            return answer.hits[:limit], answer.full[:limit]
        if len(answer.hits) < answer.limit and len(answer.full) < answer.limit:  # it held every hit there is
            return list(answer.hits), answer.full
        return None

    def put(
        self, key: tuple[object, ...], limit: int, hits: list[tuple[int, float]], full: tuple[int, ...]
    ) -> None:
        version = _version()
        if version is None:
            return
        with self._lock:
            self._answers[key] = _Answer(connection.connection, version, limit, list(hits), full)
            self._answers.move_to_end(key)
            while len(self._answers) > self.ENTRIES:
                self._answers.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._answers.clear()


def _version() -> tuple[int, int] | None:
    """What changes when this connection's database does, or None off SQLite."""
    if connection.vendor != "sqlite":
        return None
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA data_version")
        (version,) = cursor.fetchone()
    return int(version), int(connection.connection.total_changes)


_REMEMBERED = Remembered()


def forget() -> None:
    """Drop this process's kept answers, term counts and filter verdicts
    (:class:`Remembered`, :class:`Held`, :class:`Narrow`): a benchmark
    timing each search from nothing kept."""
    _REMEMBERED.clear()
    _HELD.clear()
    _narrow.clear()


def rebuild() -> int:
    """Repopulate the index from every live chunk; returns the row count."""
    return _backend().rebuild()


def clear() -> None:
    _backend().clear()


def live_count() -> int:
    """Rows in the index; equals the number of live chunks when in sync."""
    return _backend().count()


def answers() -> None:
    """Raise DatabaseError unless the index can be queried; reads one row at
    most (``/healthz``, asked by anyone: never work that grows with the index)."""
    _backend().answers()


def compact(stop: threading.Event | None = None) -> int:
    """Merge the SQLite index's segments where two lie on one level, a step
    of at most :data:`MERGE_PAGES` pages per transaction, until none is
    left to merge (or ``stop``); returns the steps taken. Each chunk
    tombstoned, revived or edited writes a new segment and, in a contentless
    table, a delete marker into it; FTS5 merges them only once a level holds
    four (``automerge``), so a tree that keeps moving left the index at
    about twice its clean size (docs/benchmarks.md). PostgreSQL's table
    needs nothing (autovacuum reuses its space)."""
    if connection.vendor != "sqlite":
        return 0
    connection.ensure_connection()
    raw = connection.connection
    assert raw is not None  # ensure_connection opened it
    steps = 0
    while stop is None or not stop.is_set():
        with transaction.atomic():
            before = raw.total_changes
            with connection.cursor() as cursor:
                # A negative count: merge wherever two segments share a level.
                cursor.execute(f"INSERT INTO {TABLE}({TABLE}, rank) VALUES ('merge', %s)", [-MERGE_PAGES])
            merged = raw.total_changes - before >= 2  # FTS5's documented test: under 2, nothing to do
        steps += 1
        if not merged:
            break
    return steps


def indexed_ids() -> set[int]:
    """The chunk ids the index holds (for consistency checks)."""
    return _backend().ids()


# -- backends ----------------------------------------------------------------------


class SQLiteFTS5(TableBackend):
    """FTS5 with the unicode61 tokenizer, which folds case and diacritics,
    under the Porter stemmer, so "uploads" and "capped" match "upload cap";
    contentless, so a row is removed by its body (the module's docstring)."""

    TABLE = TABLE
    ID_COLUMN = "rowid"

    def create(self, cursor: CursorWrapper) -> None:
        cursor.execute(create_sql())

    def replace(self, rows: list[Row]) -> None:
        self.delete([row[0] for row in rows])
        self.insert(rows)

    def insert(self, rows: list[Row]) -> None:
        self.insert_columns([(row[0], *columns(*row[1:])) for row in rows])

    def insert_columns(self, rows: list[tuple[int, str, str]]) -> None:
        """Insert rows whose head and body are already what :func:`columns` makes of them."""
        with connection.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {TABLE}(rowid, head, body) VALUES (%s, %s, %s)", rows)

    def delete(self, chunk_ids: list[int]) -> None:
        """Remove the rows of these chunks that the table holds, each by the
        columns it was written with (a row absent is left alone: deleting a body
        FTS5 never held would corrupt its counts)."""
        if not chunk_ids:
            return
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT rowid FROM {TABLE} WHERE rowid IN ({marks(chunk_ids)})", chunk_ids)
            held = [row[0] for row in cursor.fetchall()]
            if not held:
                return
            cursor.execute(
                f"SELECT c.chunk_id, c.context, {slices.SQL_FIELDS}, c.index_kind FROM chunks c "
                f"WHERE c.chunk_id IN ({marks(held)})",
                held,
            )
            rows = slices.texts(cursor.fetchall(), 2)
            cursor.executemany(
                f"INSERT INTO {TABLE}({TABLE}, rowid, head, body) VALUES ('delete', %s, %s, %s)",
                [(chunk_id, *columns(context, text, kind)) for chunk_id, context, text, kind in rows],
            )

    def empty(self, cursor: CursorWrapper) -> None:
        """A contentless table cannot be emptied by DELETE: FTS5's own command."""
        cursor.execute(f"INSERT INTO {TABLE}({TABLE}) VALUES ('delete-all')")

    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: SqlParams
    ) -> list[tuple[int, float]]:
        if require_all:
            return self._top(_quoted(terms, " AND "), limit, filter_sql, params)
        if len(terms) > 1:
            pruned = self._pruned(terms, limit, filter_sql, params)
            if pruned is not None:
                return pruned
        return self._top(_quoted(terms, " OR "), limit, filter_sql, params)

    def _pruned(
        self, terms: list[str], limit: int, filter_sql: str, params: SqlParams
    ) -> list[tuple[int, float]] | None:
        """The any-term query's hits, the same rows in the same order,
        without ranking the rows that hold only its commonest terms; None
        when that cannot be shown, and the query is ranked whole.

        BM25 is a sum over the query's terms, each term's share depending
        only on that term (its IDF, its count in the row) and the row's
        length, and less than ``idf * (k1 + 1)`` (max-score pruning). The
        rows holding a rare term are ranked first, scored with every term:
        those holding some of the other terms too (``A AND B``) and those
        holding none (``A NOT B``), each phrase once, as the whole query
        scores them. Their ``limit``-th score is a floor for the whole
        query's ``limit``-th. The commonest terms whose bounds together stay
        under that floor cannot lift a row holding none of the other terms
        into the answer: when that is all of them, the rare rows are the
        answer; else the rows holding one of the terms not left out are
        ranked the same way. The rare terms
        are those held by at most ``RARE_SHARE`` of the commonest term's
        rows, and the next rarer while they hold fewer than ``limit`` rows.
        The rows holding only ``lock`` or ``page`` (a large part of a
        kernel tree) are counted, not ranked."""
        held = _HELD.counts(terms)
        total = _row_count()
        if total is None or max(held.values()) < PRUNE_ROWS:
            return None
        by_rarity = sorted(terms, key=lambda term: (held[term], term))
        rare = max(1, sum(held[term] <= held[by_rarity[-1]] * RARE_SHARE for term in terms))
        while True:
            first = self._split(by_rarity[:rare], by_rarity[rare:], limit, filter_sql, params)
            if len(first) >= limit:
                break
            rare += 1  # too few rows hold the rare terms: the next rarer one counts, never the commonest
            if rare >= len(terms):
                return None
        floor = first[-1][1]
        left_out: list[str] = []
        bound = 0.0
        for term in reversed(by_rarity[rare:]):
            most = _idf(total, held[term]) * (BM25_K1 + 1) * (1 + 1e-9)
            if bound + most >= floor:
                break
            left_out.append(term)
            bound += most
        if len(left_out) == len(terms) - rare:  # the rows holding a rare term are the answer's
            return first
        if not left_out:
            return None
        kept = [term for term in terms if term not in left_out]
        return self._split(kept, left_out, limit, filter_sql, params)

    def _split(
        self, some: list[str], others: list[str], limit: int, filter_sql: str, params: SqlParams
    ) -> list[tuple[int, float]]:
        """The best ``limit`` rows holding one of ``some``, each scored by
        BM25 over ``some`` and ``others`` (the rows holding one of ``others``
        too, and those holding none), without reading the rows that hold
        only ``others``."""
        first, second = _quoted(some, " OR "), _quoted(others, " OR ")
        both = self._top(f"({first}) AND ({second})", limit, filter_sql, params)
        only = self._top(f"({first}) NOT ({second})", limit, filter_sql, params)
        return sorted(both + only, key=lambda hit: (-hit[1], hit[0]))[:limit]

    def all_ids(self, terms: list[str], *, limit: int, filter_sql: str, params: SqlParams) -> tuple[int, ...]:
        """Live chunks passing the filter that hold every term, at most
        ``limit``: as many as ``query(terms, require_all=True, ...)`` gives,
        read in rowid order without ranking them (BM25 reads every match)."""
        match = _quoted(terms, " AND ")
        if filter_sql and _narrow(limit, filter_sql, params):
            return tuple(chunk_id for chunk_id, _ in self._joined(match, limit, filter_sql, params))
        window = limit
        while True:
            with connection.cursor() as cursor:
                cursor.execute(f"SELECT rowid FROM {TABLE} WHERE {TABLE} MATCH %s LIMIT %s", [match, window])
                rows = [row[0] for row in cursor.fetchall()]
                live = _live_ids(rows, cursor, filter_sql, params)
            if len(live) >= limit or len(rows) < window:
                return tuple(rowid for rowid in rows if rowid in live)[:limit]
            if filter_sql and window >= FILTER_WINDOW:
                return tuple(chunk_id for chunk_id, _ in self._joined(match, limit, filter_sql, params))
            window *= 4

    def _top(self, match: str, limit: int, filter_sql: str, params: SqlParams) -> list[tuple[int, float]]:
        """FTS5's own top-N by rank, then liveness and the filter checked on
        just those rows; when too few pass, a window four times larger is
        read. Tombstones are deleted from the table, so liveness rarely drops
        a row. Joining the filter into the MATCH query instead makes SQLite
        rank every matching row through the join, several times slower at
        10k chunks (docs/benchmarks.md); a filter so selective that the
        window outgrows :data:`FILTER_WINDOW` falls back to that join, and
        one that :func:`_narrow` finds too selective for the windows goes to
        it at once."""
        if filter_sql and _narrow(limit, filter_sql, params):
            return self._joined(match, limit, filter_sql, params)
        window = limit
        while True:
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT rowid, rank FROM {TABLE} WHERE {TABLE} MATCH %s AND rank MATCH %s "
                    "ORDER BY rank, rowid LIMIT %s",
                    [match, RANK, window],
                )
                rows = cursor.fetchall()
                live = _live_ids([rowid for rowid, _ in rows], cursor, filter_sql, params)
            hits = [(rowid, -rank) for rowid, rank in rows if rowid in live]
            if len(hits) >= limit or len(rows) < window:
                return hits[:limit]
            if filter_sql and window >= FILTER_WINDOW:
                return self._joined(match, limit, filter_sql, params)
            window *= 4

    def _joined(self, match: str, limit: int, filter_sql: str, params: SqlParams) -> list[tuple[int, float]]:
        sql = (
            f"SELECT c.chunk_id, {BM25} AS bm25_score FROM {TABLE} "
            f"JOIN chunks c ON c.chunk_id = {TABLE}.rowid {TO_DOCUMENT} "
            f"WHERE {TABLE} MATCH %s AND {LIVE} AND ({filter_sql}) "
            "ORDER BY bm25_score, c.chunk_id LIMIT %s"
        )
        return scored(sql, [match, *params, limit], sign=-1.0)


def _quoted(terms: list[str], joiner: str) -> str:
    """A MATCH expression of ``terms`` joined by ``joiner``. Tokens hold only
    letters and digits; quoting still makes any character a literal, so
    MATCH never sees an operator."""
    return joiner.join('"' + term.replace('"', '""') + '"' for term in terms)


def _idf(total: int, held: int) -> float:
    """FTS5's bm25() IDF of a term ``held`` by that many of ``total`` rows."""
    idf = math.log((total - held + 0.5) / (held + 0.5))
    return idf if idf > 0 else 1e-6


def _row_count() -> int | None:
    """The rows of the FTS5 table as bm25() counts them: the first number of
    its averages record (row 1 of its ``_data`` table, a varint), or None
    when there is none."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT block FROM {TABLE}_data WHERE id = 1")
        row = cursor.fetchone()
    if row is None or not row[0]:
        return None
    return _varint(bytes(row[0]))


def _varint(data: bytes) -> int | None:
    """SQLite's varint at the start of ``data`` (big-endian, seven bits a
    byte while the high bit is set; the ninth byte gives eight)."""
    value = 0
    for index, byte in enumerate(data[:9]):
        if index == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value
    return None


class Held:
    """How many rows hold each term (what bm25() counts for its IDF), kept
    per process while the database is unchanged (as :class:`Remembered`):
    ``lock`` and ``page`` come back in query after query."""

    ENTRIES = 4096

    def __init__(self) -> None:
        self._raw: object = None
        self._version: tuple[int, int] | None = None
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def counts(self, terms: list[str]) -> dict[str, int]:
        version = _version()
        with self._lock:
            if self._raw is not connection.connection or self._version != version:
                self._raw, self._version, self._counts = connection.connection, version, {}
            known = {term: self._counts[term] for term in terms if term in self._counts}
        missing = [term for term in terms if term not in known]
        with connection.cursor() as cursor:
            for term in missing:
                cursor.execute(f"SELECT count(*) FROM {TABLE} WHERE {TABLE} MATCH %s", [_quoted([term], "")])
                known[term] = int(cursor.fetchone()[0])
        with self._lock:
            if self._raw is connection.connection and self._version == version:
                if len(self._counts) + len(missing) > self.ENTRIES:
                    self._counts = {}
                self._counts.update((term, known[term]) for term in missing)
        return known

    def clear(self) -> None:
        with self._lock:
            self._raw, self._version, self._counts = None, None, {}


_HELD = Held()


class Narrow:
    """Whether a filter lets through so few live chunks that FTS5's best
    :data:`FILTER_WINDOW` rows would hold fewer than ``limit`` of them, in
    proportion: a folder of a big tree (``drivers/net/ipa/data/``, 79 of
    235,715 chunks). The windows of :meth:`SQLiteFTS5._top` then rank four
    growing windows of every matching row, check them and throw them away
    before the join they end in, at every tier of a search: 1.4 CPU-s for
    one such search on the kernel's ``drivers/net``, 0.06 without the
    filter (session 23). Counted from the documents down (a
    ``CROSS JOIN`` keeps SQLite's planner from reading every live chunk
    first) and only up to where the answer is known; remembered per filter
    while the database is unchanged, as :class:`Held`."""

    ENTRIES = 256

    def __init__(self) -> None:
        self._raw: object = None
        self._version: tuple[int, int] | None = None
        self._known: dict[tuple[str, SqlParams, int], bool] = {}
        self._lock = threading.Lock()

    def __call__(self, limit: int, filter_sql: str, params: SqlParams) -> bool:
        total = _row_count()
        if not total:
            return False
        bound = total * limit // FILTER_WINDOW
        if bound < limit:  # a small table: the windows reach its end at once
            return False
        key = (filter_sql, tuple(params), bound)
        version = _version()
        with self._lock:
            if self._raw is not connection.connection or self._version != version:
                self._raw, self._version, self._known = connection.connection, version, {}
            if key in self._known:
                return self._known[key]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM (SELECT 1 FROM documents d CROSS JOIN representations r "
                "CROSS JOIN chunks c WHERE r.document_id = d.doc_id AND c.representation_id = r.rep_id "
                f"AND {LIVE} AND ({filter_sql}) LIMIT %s)",
                [*params, bound],
            )
            narrow = int(cursor.fetchone()[0]) < bound
        with self._lock:
            if self._raw is connection.connection and self._version == version:
                if len(self._known) >= self.ENTRIES:
                    self._known = {}
                self._known[key] = narrow
        return narrow

    def clear(self) -> None:
        with self._lock:
            self._raw, self._version, self._known = None, None, {}


_narrow = Narrow()


def _live_ids(
    chunk_ids: list[int], cursor: CursorWrapper, filter_sql: str = "", params: SqlParams = ()
) -> set[int]:
    """Those of ``chunk_ids`` that are live and pass ``filter_sql``.

    Each is looked up by its id (``NOT INDEXED``): with no statistics,
    SQLite's planner read ``c.deleted = FALSE`` through the index that
    begins with ``deleted`` instead, every live chunk for a handful of ids
    (0.1 s a call on a 940,000-chunk index, several calls a search)."""
    if not chunk_ids:
        return set()
    extra = f" AND ({filter_sql})" if filter_sql else ""
    listed, ids = one_of("c.chunk_id", chunk_ids)  # one variable, however far the window grew
    cursor.execute(
        f"SELECT c.chunk_id FROM chunks c NOT INDEXED {TO_DOCUMENT} WHERE {listed} AND {LIVE}{extra}",
        [ids, *params],
    )
    return {row[0] for row in cursor.fetchall()}


class Unavailable:
    """Databases without a lexical backend yet: nothing indexed, nothing found."""

    def replace(self, rows: list[Row]) -> None:
        pass

    def insert(self, rows: list[Row]) -> None:
        pass

    def delete(self, chunk_ids: list[int]) -> None:
        pass

    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: SqlParams
    ) -> list[tuple[int, float]]:
        return []

    def rebuild(self) -> int:
        return 0

    def clear(self) -> None:
        pass

    def count(self) -> int:
        return 0

    def answers(self) -> None:
        pass

    def ids(self) -> set[int]:
        return set()


def _backend() -> Backend:
    if connection.vendor == "sqlite":
        return SQLiteFTS5()
    if connection.vendor == "postgresql":
        # it imports PyStemmer, of the optional `scale` extra: only a PostgreSQL store needs it
        from corpus.index.lexical_pg import PostgresFTS

        return PostgresFTS()
    return Unavailable()
