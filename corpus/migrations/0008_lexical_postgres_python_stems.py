"""PostgreSQL's lexical rows are built in Python (corpus/index/lexical_pg.py).

Lexemes are now stemmed by the Porter stemmer, FTS5's, instead of
PostgreSQL's snowball configuration, so every live chunk is re-indexed:
rows of the old format would not match the new queries' lexemes. A no-op
on other databases.
"""

from django.db import migrations


def reindex(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from corpus.index.lexical_pg import reindex_all

    Chunk = apps.get_model("corpus", "Chunk")
    rows = Chunk.objects.using(schema_editor.connection.alias).filter(deleted=False)
    with schema_editor.connection.cursor() as cursor:
        # chunks had no context yet (0011); lexical_pg reads (chunk_id, context, text, kind)
        texts = rows.values_list("chunk_id", "text", "index_kind").iterator(chunk_size=500)
        reindex_all(cursor, ((chunk_id, "", text, kind) for chunk_id, text, kind in texts))


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0007_job_item_failures_embed_seq"),
    ]

    operations = [
        migrations.RunPython(reindex, migrations.RunPython.noop),
    ]
