"""The lexical index table on PostgreSQL (corpus/index/lexical_pg.py).

A no-op on other databases. Existing live chunks are indexed with the
current splitter.
"""

from django.db import migrations


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from corpus.index.lexical_pg import UPSERT, create, document

    Chunk = apps.get_model("corpus", "Chunk")
    rows = Chunk.objects.using(schema_editor.connection.alias).filter(deleted=False)
    with schema_editor.connection.cursor() as cursor:
        create(cursor)
        cursor.executemany(
            UPSERT, [(chunk_id, document(text)) for chunk_id, text in rows.values_list("chunk_id", "text")]
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP TABLE IF EXISTS chunks_lexical")


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0003_chunk_fts"),
    ]

    operations = [
        migrations.RunPython(create, drop),
    ]
