"""The lexical index gets a head column (corpus/index/lexical.py): a
chunk's context and first line, where a unit names what it defines, which
BM25 weighs above the rest of its text. Every live chunk is indexed anew:
on SQLite into a new two-column table that then takes the old one's name
(a contentless row is deleted by its exact columns, so the old rows cannot
be kept), on PostgreSQL with the head's lexemes weighted A.
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
        ("corpus", "0018_drop_symbol_name_index"),
    ]

    operations = [
        migrations.RunPython(rebuild, migrations.RunPython.noop),
    ]
