"""The lexical index on PostgreSQL: a tsvector per live chunk, under GIN.

Each chunk is indexed as the tokens of the shared splitter
(``lexical.tokens``: every identifier whole and in its parts), with
diacritics folded as FTS5's ``remove_diacritics`` does, under the
``dir2mcp`` configuration: the English Snowball stemmer, as FTS5's Porter
tokenizer stems ("uploads" finds "upload"), and, like FTS5, no stop words.
Feeding tokens rather than raw text keeps PostgreSQL's parser from reading
``os.path.join`` or ``corpus/ingest/pipeline.py`` as one host or file name.
Each query term goes through ``plainto_tsquery`` as a bound parameter, so
no input forms query syntax. ``ts_rank`` with
length normalisation (flag 1) stands in for BM25: the tiers (every term,
then some) are the same, the order within a tier can differ from SQLite's.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from django.db import connection

from corpus.index.lexical import TableBackend, tokens

TABLE = "chunks_lexical"
#: English stemming with no stop-word list: ``for``, ``if`` and ``is`` are
#: code words, and FTS5 (the SQLite backend) keeps them too.
CONFIG = "dir2mcp"
CREATE_CONFIG = f"""
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_ts_config WHERE cfgname = '{CONFIG}') THEN
    CREATE TEXT SEARCH DICTIONARY {CONFIG}_stem (TEMPLATE = snowball, Language = english);
    CREATE TEXT SEARCH CONFIGURATION {CONFIG} (COPY = english);
    ALTER TEXT SEARCH CONFIGURATION {CONFIG}
      ALTER MAPPING FOR asciiword, asciihword, hword_asciipart, word, hword, hword_part
      WITH {CONFIG}_stem;
  END IF;
END $$
"""
CREATE_SQL = (
    CREATE_CONFIG,
    f"CREATE TABLE IF NOT EXISTS {TABLE} (chunk_id bigint PRIMARY KEY, body tsvector NOT NULL)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_body ON {TABLE} USING gin (body)",
)
UPSERT = (
    f"INSERT INTO {TABLE} (chunk_id, body) VALUES (%s, to_tsvector('{CONFIG}', %s)) "
    "ON CONFLICT (chunk_id) DO UPDATE SET body = EXCLUDED.body"
)


def fold(text: str) -> str:
    """Diacritics removed: "café" -> "cafe"."""
    if text.isascii():  # most code and much prose: nothing to fold
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def document(text: str) -> str:
    """What is indexed for a chunk: its folded tokens, space-separated."""
    return fold(" ".join(tokens(text)))


def create(cursor) -> None:
    for statement in CREATE_SQL:
        cursor.execute(statement)


class PostgresFTS(TableBackend):
    TABLE = TABLE
    ID_COLUMN = "chunk_id"

    def create(self, cursor) -> None:
        create(cursor)

    def replace(self, rows: list[tuple[int, str]]) -> None:
        self.insert(rows)  # an upsert replaces

    def insert(self, rows: list[tuple[int, str]]) -> None:
        with connection.cursor() as cursor:
            cursor.executemany(UPSERT, [(chunk_id, document(text)) for chunk_id, text in rows])

    def delete(self, chunk_ids: list[int]) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE chunk_id = ANY(%s)", [list(chunk_ids)])

    def query(
        self, terms: list[str], *, require_all: bool, limit: int, filter_sql: str, params: Sequence
    ) -> list[tuple[int, float]]:
        joiner = " && " if require_all else " || "
        tsquery = joiner.join([f"plainto_tsquery('{CONFIG}', %s)"] * len(terms))
        extra = f"AND ({filter_sql})" if filter_sql else ""
        sql = (
            f"WITH q AS (SELECT {tsquery} AS query) "
            f"SELECT c.chunk_id, ts_rank(l.body, q.query, 1) AS score FROM q, {TABLE} l "
            "JOIN chunks c ON c.chunk_id = l.chunk_id "
            "JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            f"WHERE l.body @@ q.query AND NOT c.deleted AND NOT d.deleted {extra} "
            "ORDER BY score DESC, c.chunk_id LIMIT %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [*(fold(term) for term in terms), *params, limit])
            return [(chunk_id, float(score)) for chunk_id, score in cursor.fetchall()]
