"""A chunk that is a run of its representation's text stores offsets into
it instead of a copy (corpus/slices.py). The two columns are added, then
each live chunk of a live representation whose text is found there is
rewritten as a slice, in batches of representations; a chunk not found
(or a tombstone, whose representation may have changed since) keeps its
text. The lexical index is unchanged: each chunk reads the same text.
"""

from django.db import migrations, models

import corpus.packed
from corpus.packed import unpack
from corpus.slices import Locator

BATCH = 100


def slice_rows(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        last = 0
        while True:
            cursor.execute(
                "SELECT rep_id, text FROM representations WHERE rep_id > %s AND deleted = %s "
                f"ORDER BY rep_id LIMIT {BATCH}",
                [last, False],
            )
            reps = {rep_id: unpack(text) or "" for rep_id, text in cursor.fetchall()}
            if not reps:
                break
            last = max(reps)
            ids = list(reps)
            cursor.execute(
                "SELECT c.chunk_id, c.representation_id, c.text, s.span_kind, s.start FROM chunks c "
                "LEFT JOIN spans s ON s.chunk_id = c.chunk_id "
                f"WHERE c.representation_id IN ({', '.join(['%s'] * len(ids))}) AND c.deleted = %s "
                "AND c.text_start IS NULL ORDER BY c.representation_id, c.ordinal",
                [*ids, False],
            )
            locators: dict[int, Locator] = {}
            updates, seen = [], set()
            for chunk_id, rep_id, text, span_kind, start in cursor.fetchall():
                if chunk_id in seen:
                    continue
                seen.add(chunk_id)
                locator = locators.get(rep_id) or locators.setdefault(rep_id, Locator(reps[rep_id]))
                found = locator.find(unpack(text) or "", start if span_kind == "lines" else None)
                if found:
                    updates.append((found[0], found[1], chunk_id))
            cursor.executemany("UPDATE chunks SET text = '', text_start = %s, text_end = %s WHERE chunk_id = %s", updates)


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0015_packed_text"),
    ]

    operations = [
        # The column keeps its name; the model's ``text`` reads either (corpus/models.py).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RenameField("chunk", "text", "stored_text"),
                migrations.AlterField(
                    model_name="chunk",
                    name="stored_text",
                    field=corpus.packed.PackedTextField(db_column="text"),
                ),
            ],
        ),
        migrations.AddField(
            model_name="chunk",
            name="text_start",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="chunk",
            name="text_end",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.RunPython(slice_rows, migrations.RunPython.noop),
    ]
