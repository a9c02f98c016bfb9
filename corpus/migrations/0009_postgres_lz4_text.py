"""PostgreSQL compresses the large text columns with lz4, where it can.

Document and chunk texts are stored out of line (TOAST) and compressed.
With PostgreSQL's default, pglz, storing the text of 868 standard-library
files and their 3,785 chunks took the server 1.41 s; with lz4 (PostgreSQL
14 and later, when built with it), 0.95 s, for a fifth more space
(docs/benchmarks.md, "Scale-out"). Rows written before keep their
compression; a server without lz4 keeps pglz. A no-op on other databases.
"""

from django.db import migrations

COLUMNS = (("representations", "text"), ("chunks", "text"))


def lz4(apps, schema_editor):
    compress(schema_editor, "lz4", COLUMNS)


def pglz(apps, schema_editor):
    compress(schema_editor, "pglz", COLUMNS)


def compress(schema_editor, method: str, columns) -> None:
    """Set these (table, column)s' compression, if the server has it."""
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND %s = ANY(enumvals)",
            [method],
        )
        if cursor.fetchone() is None:
            return
        for table, column in columns:
            cursor.execute(f"ALTER TABLE {table} ALTER COLUMN {column} SET COMPRESSION {method}")


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0008_lexical_postgres_python_stems"),
    ]

    operations = [
        migrations.RunPython(lz4, pglz),
    ]
