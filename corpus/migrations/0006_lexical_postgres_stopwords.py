"""PostgreSQL's lexical index keeps stop words (corpus/index/lexical_pg.py).

Creates the ``dir2mcp`` text search configuration and re-indexes every live
chunk with it. A no-op on other databases.
"""

from django.db import migrations


def reindex(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from corpus.index.lexical_pg import TABLE, UPSERT, create, document

    Chunk = apps.get_model("corpus", "Chunk")
    rows = Chunk.objects.using(schema_editor.connection.alias).filter(deleted=False)
    with schema_editor.connection.cursor() as cursor:
        create(cursor)
        cursor.execute(f"DELETE FROM {TABLE}")
        cursor.executemany(
            UPSERT, [(chunk_id, document(text)) for chunk_id, text in rows.values_list("chunk_id", "text")]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0005_scaleout"),
    ]

    operations = [
        migrations.RunPython(reindex, migrations.RunPython.noop),
    ]
