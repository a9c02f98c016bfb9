"""``chunks.text_hash`` goes: the writer matches a representation's stored
units with its new drafts by a hash of their texts computed as it compares
them (corpus/ingest/writer.py), and the column took 64 bytes a chunk (about
a tenth of the text a code tree indexes; docs/benchmarks.md)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0016_chunk_slices"),
    ]

    operations = [
        migrations.RemoveField(model_name="chunk", name="text_hash"),
    ]
