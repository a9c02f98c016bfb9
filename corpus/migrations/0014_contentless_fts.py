"""The SQLite lexical table becomes contentless (corpus/index/lexical.py):
the same terms, counts and positions, without a second copy of each chunk's
text. The new table is filled from the live chunks with the current
splitter, then takes the old one's name. PostgreSQL: nothing to do (its
table holds tsvectors, not text).
"""

from django.db import migrations

from corpus.index.lexical import index_text
from corpus.index.tables import batches
from corpus.models import with_context

BATCH = 2000  # rows read at a time; written in tables.batches' size
#: The table as this migration made it (one column: 0019 added the head).
CREATE_SQL = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts_contentless "
    "USING fts5(body, content = '', tokenize = 'porter unicode61 remove_diacritics 2')"
)


def to_contentless(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    Chunk = apps.get_model("corpus", "Chunk")
    live = Chunk.objects.using(schema_editor.connection.alias).filter(deleted=False)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS chunks_fts_contentless")
        cursor.execute(CREATE_SQL)
        live_rows = live.values_list("chunk_id", "context", "text").iterator(chunk_size=BATCH)
        bodies = ((cid, index_text(with_context(context, text))) for cid, context, text in live_rows)
        for batch in batches(bodies):
            cursor.executemany("INSERT INTO chunks_fts_contentless(rowid, body) VALUES (%s, %s)", batch)
        cursor.execute("DROP TABLE IF EXISTS chunks_fts")
        cursor.execute("ALTER TABLE chunks_fts_contentless RENAME TO chunks_fts")


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0013_symbols"),
    ]

    operations = [
        migrations.RunPython(to_contentless, migrations.RunPython.noop),
    ]
