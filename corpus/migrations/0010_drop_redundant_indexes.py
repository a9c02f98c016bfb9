"""Indexes that only cost writes, and lz4 for the lexical tsvectors.

Every index is maintained on every insert. These were duplicates or never
read: the foreign-key indexes of representations, chunks and spans (each a
prefix of a composite index: rep_doc_type, chunk_rep_live, span_chunk),
``chunks.text_hash`` (compared in Python among one representation's
chunks, never looked up) and the single-column indexes of
``documents.doc_type``, ``status`` and ``deleted`` (PostgreSQL added a
second, ``_like``, for each text one). The composite indexes
doc_live_path and doc_live_type_status serve the queries.

On PostgreSQL the lexical table's tsvectors were still compressed with
pglz, 7% of the server's time in writing chunks; they now use lz4 where
the server has it, like the texts (0009). Measured in docs/benchmarks.md
("Scale-out", 2026-11-24, second part).
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models


_lz4 = importlib.import_module("corpus.migrations.0009_postgres_lz4_text")
LEXICAL = (("chunks_lexical", "body"),)


def lz4(apps, schema_editor):
    _lz4.compress(schema_editor, "lz4", LEXICAL)


def pglz(apps, schema_editor):
    _lz4.compress(schema_editor, "pglz", LEXICAL)


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0009_postgres_lz4_text"),
    ]

    operations = [
        migrations.AlterField(
            model_name="chunk",
            name="representation",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="chunks",
                to="corpus.representation",
            ),
        ),
        migrations.AlterField(
            model_name="chunk",
            name="text_hash",
            field=models.CharField(max_length=64),
        ),
        migrations.AlterField(
            model_name="document",
            name="deleted",
            field=models.BooleanField(default=False),
        ),
        migrations.AlterField(
            model_name="document",
            name="doc_type",
            field=models.CharField(max_length=32),
        ),
        migrations.AlterField(
            model_name="document",
            name="status",
            field=models.CharField(
                choices=[("ok", "Ok"), ("skipped", "Skipped"), ("error", "Error")],
                default="ok",
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="representation",
            name="document",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="representations",
                to="corpus.document",
            ),
        ),
        migrations.AlterField(
            model_name="span",
            name="chunk",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="spans",
                to="corpus.chunk",
            ),
        ),
        migrations.RunPython(lz4, pglz),
    ]
