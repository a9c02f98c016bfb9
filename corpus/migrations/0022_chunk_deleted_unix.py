"""When a chunk was tombstoned, so that tombstones can be collected oldest
first (corpus/ingest/collect.py, issue #37 item 5). Chunks already
tombstoned count from this migration."""

import time

from django.db import migrations, models


def date_tombstones(apps, schema_editor):
    chunk = apps.get_model("corpus", "Chunk")
    chunk.objects.filter(deleted=True).update(deleted_unix=int(time.time()))


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0021_view_pending"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="deleted_unix",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(date_tombstones, migrations.RunPython.noop),
    ]
