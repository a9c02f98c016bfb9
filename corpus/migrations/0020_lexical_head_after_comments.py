"""A code chunk's lexical head is now the line that names what it defines,
after the comments before it (a JSDoc, Javadoc or Rust doc block, ``//``
and ``#`` lines), not the comment's first line (corpus/index/words.py
``head_and_body``): in a documented tree the head, which BM25 weighs 3 times
the rest, held ``/**`` instead of the name. Every live chunk is indexed
anew, as 0019 did (a contentless row is deleted by its exact columns).
"""

import importlib

from django.db import migrations

# The same rebuild as 0019's: drop the SQLite table, index every live chunk anew.
rebuild = importlib.import_module("corpus.migrations.0019_lexical_head").rebuild


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0019_lexical_head"),
    ]

    operations = [
        migrations.RunPython(rebuild, migrations.RunPython.noop),
    ]
