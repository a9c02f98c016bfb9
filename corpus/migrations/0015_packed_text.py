"""Chunk and representation texts are stored compressed on SQLite
(corpus/packed.py). The columns keep their type (a SQLite column holds a
BLOB as well as a TEXT), so only the model state changes and the rows
already stored are packed in place, in batches; a row left as it was still
reads. PostgreSQL: nothing to do (TOAST compresses there).
"""

from django.db import migrations

import corpus.packed
from corpus.packed import pack

BATCH = 2000
TABLES = (("chunks", "chunk_id"), ("representations", "rep_id"))


def pack_rows(apps, schema_editor):
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cursor:
        for table, key in TABLES:
            last = 0
            while True:
                cursor.execute(
                    f"SELECT {key}, text FROM {table} WHERE {key} > %s AND typeof(text) = 'text' "
                    f"ORDER BY {key} LIMIT {BATCH}",
                    [last],
                )
                rows = cursor.fetchall()
                if not rows:
                    break
                last = rows[-1][0]
                packed = [(pack(text), row_id) for row_id, text in rows]
                cursor.executemany(
                    f"UPDATE {table} SET text = %s WHERE {key} = %s",
                    [(value, row_id) for value, row_id in packed if isinstance(value, bytes)],
                )


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0014_contentless_fts"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="chunk",
                    name="text",
                    field=corpus.packed.PackedTextField(),
                ),
                migrations.AlterField(
                    model_name="representation",
                    name="text",
                    field=corpus.packed.PackedTextField(blank=True, default=""),
                ),
            ],
            database_operations=[migrations.RunPython(pack_rows, migrations.RunPython.noop)],
        ),
    ]
