"""MCP sessions and their resource subscriptions live in the database, so
several daphne processes agree."""

from __future__ import annotations

from django.db import models


class McpSession(models.Model):
    """One ``MCP-Session-Id``: who opened it, what it speaks, when it was seen."""

    session_id = models.CharField(max_length=64, primary_key=True)
    # sha256 of the bearer token that opened it: a session is bound to its
    # credential, never a credential itself (MCP security best practices).
    auth_digest = models.CharField(max_length=64, blank=True, default="")
    protocol_version = models.CharField(max_length=16)
    client_name = models.CharField(max_length=200, blank=True, default="")
    client_version = models.CharField(max_length=100, blank=True, default="")
    log_level = models.CharField(max_length=16, blank=True, default="")
    created_unix = models.FloatField()
    last_seen_unix = models.FloatField(db_index=True)
    # The standalone GET stream (mcp_gateway/standalone.py): which process
    # holds it (a random token; "" when none) and when it last said so, so a
    # second GET on any process gets 409 and a crashed holder goes stale.
    stream_holder = models.CharField(max_length=64, blank=True, default="")
    stream_seen_unix = models.FloatField(default=0.0)

    class Meta:
        db_table = "mcp_sessions"

    def __str__(self) -> str:
        return f"{self.session_id} ({self.client_name or 'client'})"


class McpSubscription(models.Model):
    """``resources/subscribe``: a session wants ``notifications/resources/updated``
    for the file ``rel_path`` names, sent with the URI it subscribed with."""

    session = models.ForeignKey(McpSession, on_delete=models.CASCADE, related_name="subscriptions")
    uri = models.CharField(max_length=2048)
    rel_path = models.CharField(max_length=2048, db_index=True)
    created_unix = models.FloatField()

    class Meta:
        db_table = "mcp_subscriptions"
        constraints = [models.UniqueConstraint(fields=["session", "uri"], name="mcp_subscription_once")]

    def __str__(self) -> str:
        return f"{self.session_id} -> {self.uri}"
