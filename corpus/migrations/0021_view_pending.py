"""A code unit's vector may be its own alone for a while: the signature view
it leans towards (``embed.signature_weight``) is embedded in a later pass,
once every unit has a vector (corpus/index/dense/embedding.py). Existing
vectors already lean towards their views, so every row starts at False.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0020_lexical_head_after_comments"),
    ]

    operations = [
        migrations.AddField(
            model_name="chunk",
            name="view_pending",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddIndex(
            model_name="chunk",
            index=models.Index(
                condition=models.Q(("view_pending", True)), fields=["chunk_id"], name="chunk_view_queue"
            ),
        ),
    ]
