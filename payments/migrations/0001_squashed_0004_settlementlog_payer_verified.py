"""Migrations 0001 to 0004 as one, for new databases (issue #35): the
tables as 0004 left them. Django uses it only where none of 0001-0004 is
applied; older databases go on with the chain.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("payments", "0001_initial"),
        ("payments", "0002_outcome_retention"),
        ("payments", "0003_settle_intent"),
        ("payments", "0004_settlementlog_payer_verified"),
    ]

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="PaymentAttempt",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=64, unique=True)),
                ("tool", models.CharField(max_length=128)),
                ("request_hash", models.CharField(max_length=64)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "in progress"),
                            ("ran", "ran, awaiting settlement"),
                            ("settling", "settling"),
                            ("done", "done"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("outcome", models.JSONField(blank=True, null=True)),
                (
                    "kept_until",
                    models.DateTimeField(
                        blank=True, db_index=True, help_text="when the stored outcome is purged", null=True
                    ),
                ),
                (
                    "owner",
                    models.CharField(
                        blank=True, default="", help_text="the process handling it", max_length=64
                    ),
                ),
                (
                    "nonce",
                    models.CharField(
                        blank=True, default="", help_text="the authorization's nonce", max_length=66
                    ),
                ),
                ("payer", models.CharField(blank=True, default="", max_length=66)),
                (
                    "amount",
                    models.CharField(
                        blank=True, default="", help_text="atomic units of the asset", max_length=78
                    ),
                ),
                (
                    "settle_attempts",
                    models.PositiveIntegerField(
                        default=0,
                        help_text="settle requests that may have reached the facilitator, unanswered",
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
        migrations.CreateModel(
            name="SettlementLog",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tool", models.CharField(db_index=True, max_length=128)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("required", "payment required"),
                            ("verified", "verified"),
                            ("settling", "settlement requested"),
                            ("settled", "settled"),
                            ("failed", "failed"),
                        ],
                        db_index=True,
                        max_length=16,
                    ),
                ),
                (
                    "price",
                    models.CharField(
                        blank=True, help_text="configured price text, e.g. 0.001", max_length=40
                    ),
                ),
                (
                    "amount",
                    models.CharField(blank=True, help_text="atomic units of the asset", max_length=78),
                ),
                ("asset", models.CharField(blank=True, max_length=66)),
                ("network", models.CharField(db_index=True, max_length=64)),
                ("pay_to", models.CharField(blank=True, max_length=66)),
                ("payer", models.CharField(blank=True, db_index=True, max_length=66)),
                (
                    "payer_verified",
                    models.BooleanField(
                        default=False,
                        help_text="the facilitator accepted the payment signed by this payer; otherwise the payer is only what the payment claimed",
                    ),
                ),
                ("transaction", models.CharField(blank=True, db_index=True, max_length=132)),
                ("error_reason", models.CharField(blank=True, max_length=128)),
                ("request_hash", models.CharField(db_index=True, max_length=64)),
                ("payment_key", models.CharField(blank=True, db_index=True, max_length=64)),
                ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
            options={
                "ordering": ["-created_at", "-id"],
            },
        ),
    ]
