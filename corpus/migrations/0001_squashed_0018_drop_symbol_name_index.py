"""Migrations 0001 to 0018 as one, for new databases (issue #35).

A fresh state directory applied 0001_squashed_0013_symbols and then five
migrations (0014-0018), three of which re-created or rewrote tables in
SQLite: 26 migrations in all with Django's own, about 0.6 CPU-seconds of
every first start, half of a `reindex` of one file, and the test suite
makes a fresh state directory for most of its several hundred processes.
This creates the tables as 0018 left them, each model with its indexes,
then runs the vendor-specific steps a new database needs (SQLite's
contentless FTS5 table, corpus/index/lexical.py; PostgreSQL's lexical
table and lz4 compression). Steps that only convert existing rows (0008's
re-index, 0012's error codes, 0014's refill, 0015's packing, 0016's
slicing) have nothing to convert here.

It replaces 0001_squashed_0013_symbols, whose file is gone: Django does not
allow two squashes of the same migrations. A database that squash made
records 0001-0013 themselves, so it is one with them applied. Django uses
this migration only where none of 0001-0018 is applied; a database that
has them all goes on from 0018, and one part-way finishes the chain. Keep
the old files until no deployment older than 0018 remains.
"""

import importlib

import django.db.models.deletion
from django.db import migrations, models

import corpus.packed
from corpus.index.lexical import create_sql

# The PostgreSQL steps, as the migrations they come from define them.
_lexical_pg = importlib.import_module("corpus.migrations.0004_lexical_postgres")
_lz4_text = importlib.import_module("corpus.migrations.0009_postgres_lz4_text")
_lz4_lexical = importlib.import_module("corpus.migrations.0010_drop_redundant_indexes")


def create_fts(apps, schema_editor):
    """The lexical table as 0014 left it: contentless, empty on a new database."""
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(create_sql("chunks_fts"))


def drop_fts(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("DROP TABLE IF EXISTS chunks_fts")


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("corpus", "0001_initial"),
        ("corpus", "0002_chunk_embedding"),
        ("corpus", "0003_chunk_fts"),
        ("corpus", "0004_lexical_postgres"),
        ("corpus", "0005_scaleout"),
        ("corpus", "0006_lexical_postgres_stopwords"),
        ("corpus", "0007_job_item_failures_embed_seq"),
        ("corpus", "0008_lexical_postgres_python_stems"),
        ("corpus", "0009_postgres_lz4_text"),
        ("corpus", "0010_drop_redundant_indexes"),
        ("corpus", "0011_chunk_context"),
        ("corpus", "0012_error_code"),
        ("corpus", "0013_symbols"),
        ("corpus", "0014_contentless_fts"),
        ("corpus", "0015_packed_text"),
        ("corpus", "0016_chunk_slices"),
        ("corpus", "0017_drop_chunk_text_hash"),
        ("corpus", "0018_drop_symbol_name_index"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Setting",
            fields=[
                ("key", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("value", models.TextField()),
            ],
            options={
                "db_table": "settings",
            },
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("name", models.CharField(max_length=255, primary_key=True, serialize=False)),
                ("hostname", models.CharField(max_length=255)),
                ("pid", models.IntegerField(default=0)),
                ("started_unix", models.FloatField(default=0)),
                ("last_seen_unix", models.FloatField(default=0)),
                ("tasks_done", models.IntegerField(default=0)),
            ],
            options={
                "db_table": "workers",
            },
        ),
        migrations.CreateModel(
            name="Document",
            fields=[
                ("doc_id", models.BigAutoField(primary_key=True, serialize=False)),
                ("rel_path", models.CharField(max_length=4096, unique=True)),
                (
                    "source_type",
                    models.CharField(
                        choices=[("file", "File"), ("archive_member", "Archive Member")],
                        default="file",
                        max_length=16,
                    ),
                ),
                ("doc_type", models.CharField(max_length=32)),
                ("size_bytes", models.BigIntegerField(default=0)),
                ("mtime_unix", models.BigIntegerField(default=0)),
                ("mtime_ns", models.BigIntegerField(default=0)),
                ("content_hash", models.CharField(blank=True, default="", max_length=64)),
                ("policy_hash", models.CharField(blank=True, default="", max_length=64)),
                (
                    "status",
                    models.CharField(
                        choices=[("ok", "Ok"), ("skipped", "Skipped"), ("error", "Error")],
                        default="ok",
                        max_length=16,
                    ),
                ),
                ("error", models.TextField(blank=True, help_text="Error or skip reason.", null=True)),
                ("error_code", models.CharField(blank=True, default="", max_length=32)),
                ("deleted", models.BooleanField(default=False)),
                ("indexed_unix", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "documents",
                "indexes": [
                    models.Index(fields=["deleted", "rel_path"], name="doc_live_path"),
                    models.Index(fields=["deleted", "doc_type", "status"], name="doc_live_type_status"),
                ],
            },
        ),
        migrations.CreateModel(
            name="IndexJob",
            fields=[
                ("job_id", models.CharField(max_length=40, primary_key=True, serialize=False)),
                ("mode", models.CharField(default="incremental", max_length=16)),
                ("running", models.BooleanField(default=True)),
                ("pid", models.IntegerField(default=0)),
                ("started_unix", models.FloatField(default=0)),
                ("updated_unix", models.FloatField(default=0)),
                ("finished_unix", models.FloatField(blank=True, null=True)),
                ("outcome", models.CharField(blank=True, default="", max_length=32)),
                ("scanned", models.IntegerField(default=0)),
                ("indexed", models.IntegerField(default=0)),
                ("skipped", models.IntegerField(default=0)),
                ("unchanged", models.IntegerField(default=0)),
                ("deleted", models.IntegerField(default=0)),
                ("representations", models.IntegerField(default=0)),
                ("chunks_total", models.IntegerField(default=0)),
                ("embedded_ok", models.IntegerField(default=0)),
                ("errors", models.IntegerField(default=0)),
                ("host", models.CharField(blank=True, default="", max_length=255)),
                ("policy", models.TextField(blank=True, default="")),
            ],
            options={
                "db_table": "index_jobs",
                "indexes": [models.Index(fields=["-started_unix"], name="job_recent")],
            },
        ),
        migrations.CreateModel(
            name="Representation",
            fields=[
                ("rep_id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "rep_type",
                    models.CharField(
                        choices=[
                            ("raw_text", "Raw Text"),
                            ("ocr_markdown", "Ocr Markdown"),
                            ("transcript", "Transcript"),
                            ("annotation_json", "Annotation Json"),
                            ("annotation_text", "Annotation Text"),
                        ],
                        max_length=32,
                    ),
                ),
                ("rep_hash", models.CharField(max_length=64)),
                ("created_unix", models.BigIntegerField(default=0)),
                ("meta_json", models.JSONField(blank=True, default=dict)),
                ("text", corpus.packed.PackedTextField(blank=True, default="")),
                ("deleted", models.BooleanField(default=False)),
                (
                    "document",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="representations",
                        to="corpus.document",
                    ),
                ),
            ],
            options={
                "db_table": "representations",
                "indexes": [
                    models.Index(fields=["document", "rep_type", "deleted"], name="rep_doc_type"),
                ],
            },
        ),
        migrations.CreateModel(
            name="Chunk",
            fields=[
                ("chunk_id", models.BigAutoField(primary_key=True, serialize=False)),
                ("ordinal", models.IntegerField()),
                ("stored_text", corpus.packed.PackedTextField(db_column="text")),
                ("context", models.TextField(blank=True, default="")),
                ("tokens_est", models.IntegerField(default=0)),
                (
                    "index_kind",
                    models.CharField(
                        choices=[("text", "Text"), ("code", "Code")], default="text", max_length=8
                    ),
                ),
                (
                    "embedding_status",
                    models.CharField(
                        choices=[("ok", "Ok"), ("pending", "Pending"), ("error", "Error")],
                        default="pending",
                        max_length=8,
                    ),
                ),
                ("embedding_error", models.TextField(blank=True, null=True)),
                ("embed_seq", models.BigIntegerField(blank=True, db_index=True, null=True)),
                ("embedding", models.BinaryField(blank=True, null=True)),
                ("deleted", models.BooleanField(default=False)),
                (
                    "representation",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="chunks",
                        to="corpus.representation",
                    ),
                ),
                ("text_start", models.IntegerField(blank=True, null=True)),
                ("text_end", models.IntegerField(blank=True, null=True)),
            ],
            options={
                "db_table": "chunks",
                "indexes": [
                    models.Index(fields=["representation", "deleted", "ordinal"], name="chunk_rep_live"),
                    models.Index(
                        fields=["deleted", "embedding_status", "index_kind"], name="chunk_embed_queue"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Span",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "span_kind",
                    models.CharField(
                        choices=[("lines", "Lines"), ("page", "Page"), ("time", "Time")], max_length=8
                    ),
                ),
                ("start", models.BigIntegerField()),
                ("end", models.BigIntegerField()),
                ("extra_json", models.JSONField(blank=True, null=True)),
                (
                    "chunk",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="spans",
                        to="corpus.chunk",
                    ),
                ),
            ],
            options={
                "db_table": "spans",
                "indexes": [models.Index(fields=["chunk"], name="span_chunk")],
            },
        ),
        migrations.CreateModel(
            name="Symbol",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                ("name_lower", models.CharField(max_length=200)),
                ("qualified", models.CharField(blank=True, default="", max_length=200)),
                ("kind", models.CharField(max_length=16)),
                ("line", models.IntegerField()),
                ("start", models.IntegerField()),
                ("end", models.IntegerField()),
                ("enclosing", models.CharField(blank=True, default="", max_length=200)),
                (
                    "document",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="symbols",
                        to="corpus.document",
                    ),
                ),
            ],
            options={
                "db_table": "symbols",
                "indexes": [
                    models.Index(fields=["name_lower"], name="symbol_name_lower"),
                    models.Index(fields=["document"], name="symbol_doc"),
                ],
            },
        ),
        migrations.CreateModel(
            name="JobItem",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("rel_path", models.TextField()),
                ("state", models.CharField(default="queued", max_length=8)),
                ("attempts", models.IntegerField(default=0)),
                ("error", models.TextField(blank=True, default="")),
                ("error_code", models.CharField(blank=True, default="", max_length=32)),
                ("worker", models.CharField(blank=True, default="", max_length=255)),
                ("finished_unix", models.FloatField(blank=True, null=True)),
                (
                    "job",
                    models.ForeignKey(
                        db_column="job_id",
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="items",
                        to="corpus.indexjob",
                    ),
                ),
            ],
            options={
                "db_table": "index_job_items",
                "indexes": [models.Index(fields=["job", "state"], name="job_item_state")],
                "constraints": [models.UniqueConstraint(fields=("job", "rel_path"), name="job_item_unique")],
            },
        ),
        migrations.CreateModel(
            name="Reference",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                ("lines", models.TextField()),
                (
                    "document",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="references",
                        to="corpus.document",
                    ),
                ),
            ],
            options={
                "db_table": "symbol_references",
                "indexes": [
                    models.Index(fields=["name"], name="reference_name"),
                    models.Index(fields=["document"], name="reference_doc"),
                ],
            },
        ),
        migrations.RunPython(create_fts, drop_fts),
        migrations.RunPython(_lexical_pg.create, _lexical_pg.drop),
        migrations.RunPython(_lz4_text.lz4, _lz4_text.pglz),
        migrations.RunPython(_lz4_lexical.lz4, _lz4_lexical.pglz),
    ]
