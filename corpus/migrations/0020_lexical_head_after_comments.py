"""A code chunk's lexical head is now the line that names what it defines,
after the comments before it (a JSDoc, Javadoc or Rust doc block, ``//``
and ``#`` lines), not the comment's first line (corpus/index/words.py
``head_and_body``): in a documented tree the head, which BM25 weighs 3 times
the rest, held ``/**`` instead of the name. Every live chunk is indexed
anew, as 0019 did (a contentless row is deleted by its exact columns).
"""

from django.db import migrations

from corpus.index import lexical


def rebuild(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS chunks_fts")
    if vendor in ("sqlite", "postgresql"):
        lexical.rebuild()


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0019_lexical_head"),
    ]

    operations = [
        migrations.RunPython(rebuild, migrations.RunPython.noop),
    ]
