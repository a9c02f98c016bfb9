"""The lexical index table on PostgreSQL (corpus/index/lexical_pg.py).

A no-op on other databases. Existing live chunks are indexed by
migration 0008, in the current format.
"""

from django.db import migrations


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from corpus.index.lexical_pg import create

    with schema_editor.connection.cursor() as cursor:
        create(cursor)


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
