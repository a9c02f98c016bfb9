"""The symbol index's look-up by exact name reads the ``name_lower``
index (with ``name`` checked on the rows it finds: corpus/navigation/names.py),
so the index on ``name`` goes (about 4% of the text a code tree indexes;
docs/benchmarks.md)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0017_drop_chunk_text_hash"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="symbol", name="symbol_name"),
    ]
