"""The lexical index table (corpus/index/lexical.py), on SQLite only.

PostgreSQL gets its own lexical backend later; there this is a no-op.
Existing live chunks are indexed with the current splitter.
"""

from django.db import migrations

CREATE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts "
    "USING fts5(body, tokenize = 'porter unicode61 remove_diacritics 2')"
)


def create_fts(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    from corpus.index.lexical import index_text

    schema_editor.execute(CREATE)
    Chunk = apps.get_model("corpus", "Chunk")
    rows = Chunk.objects.using(schema_editor.connection.alias).filter(deleted=False)
    with schema_editor.connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO chunks_fts(rowid, body) VALUES (%s, %s)",
            ((chunk_id, index_text(text)) for chunk_id, text in rows.values_list("chunk_id", "text")),
        )


def drop_fts(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TABLE IF EXISTS chunks_fts")


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0002_chunk_embedding"),
    ]

    operations = [
        migrations.RunPython(create_fts, drop_fts),
    ]
