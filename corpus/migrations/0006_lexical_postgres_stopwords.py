"""PostgreSQL's lexical index keeps stop words (corpus/index/lexical_pg.py).

It created the ``dir2mcp`` text search configuration, which lexemes built
in Python (migration 0008) no longer use; now it only makes sure the table
exists. A no-op on other databases.
"""

from django.db import migrations


def reindex(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from corpus.index.lexical_pg import create

    with schema_editor.connection.cursor() as cursor:
        create(cursor)


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0005_scaleout"),
    ]

    operations = [
        migrations.RunPython(reindex, migrations.RunPython.noop),
    ]
