"""Migrations 0001 and 0002 as one, for new databases (issue #35): the
tables as 0002 left them. Django uses it only where neither is applied;
older databases go on with the chain.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("mcp_gateway", "0001_initial"),
        ("mcp_gateway", "0002_notifications"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="McpSession",
            fields=[
                ("session_id", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("auth_digest", models.CharField(blank=True, default="", max_length=64)),
                ("protocol_version", models.CharField(max_length=16)),
                ("client_name", models.CharField(blank=True, default="", max_length=200)),
                ("client_version", models.CharField(blank=True, default="", max_length=100)),
                ("log_level", models.CharField(blank=True, default="", max_length=16)),
                ("created_unix", models.FloatField()),
                ("last_seen_unix", models.FloatField(db_index=True)),
                ("stream_holder", models.CharField(blank=True, default="", max_length=64)),
                ("stream_seen_unix", models.FloatField(default=0.0)),
            ],
            options={
                "db_table": "mcp_sessions",
            },
        ),
        migrations.CreateModel(
            name="McpSubscription",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
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
