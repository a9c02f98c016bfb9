# The standalone GET stream's holder on a session, and resource subscriptions.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("mcp_gateway", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="mcpsession",
            name="stream_holder",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="mcpsession",
            name="stream_seen_unix",
            field=models.FloatField(default=0.0),
        ),
        migrations.CreateModel(
            name="McpSubscription",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("uri", models.CharField(max_length=2048)),
                ("rel_path", models.CharField(db_index=True, max_length=2048)),
                ("created_unix", models.FloatField()),
                (
                    "session",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="subscriptions",
                        to="mcp_gateway.mcpsession",
                    ),
                ),
            ],
            options={
                "db_table": "mcp_subscriptions",
                "constraints": [
                    models.UniqueConstraint(fields=("session", "uri"), name="mcp_subscription_once")
                ],
            },
        ),
    ]
