"""MCP sessions live in the database, so several daphne processes agree."""

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

    class Meta:
        db_table = "mcp_sessions"

    def __str__(self) -> str:
        return f"{self.session_id} ({self.client_name or 'client'})"
