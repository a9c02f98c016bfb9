"""MCP sessions and their resource subscriptions in the admin: read-only, with a revoke action."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import admin, messages

from corpus.admin import ReadOnlyAdmin
from mcp_gateway import sessions
from mcp_gateway.models import McpSession, McpSubscription


def _stamp(unix: float | None) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S") if unix else "-"


@admin.register(McpSession)
class McpSessionAdmin(ReadOnlyAdmin):
    list_display = ("session_id", "client_name", "client_version", "protocol_version", "opened", "last_seen")
    search_fields = ("session_id", "client_name")
    list_filter = ("protocol_version",)
    ordering = ("-last_seen_unix",)
    # auth_digest binds a session to its credential; it is not shown.
    fields = (
        "session_id",
        "client_name",
        "client_version",
        "protocol_version",
        "log_level",
        "opened",
        "last_seen",
    )
    readonly_fields = fields
    actions = ("revoke",)

    @admin.display(description="opened", ordering="created_unix")
    def opened(self, obj):
        return _stamp(obj.created_unix)

    @admin.display(description="last seen", ordering="last_seen_unix")
    def last_seen(self, obj):
        return _stamp(obj.last_seen_unix)

    def has_revoke_permission(self, request):
        return request.user.has_perm("mcp_gateway.delete_mcpsession")

    @admin.action(description="Revoke selected sessions", permissions=["revoke"])
    def revoke(self, request, queryset):
        ended = sum(sessions.end(session_id) for session_id in queryset.values_list("session_id", flat=True))
        self.message_user(
            request, f"Revoked {ended} session(s); their clients must initialize again.", messages.SUCCESS
        )


@admin.register(McpSubscription)
class McpSubscriptionAdmin(ReadOnlyAdmin):
    """``resources/subscribe``: which session hears about which file."""

    list_display = ("session", "uri", "subscribed")
    search_fields = ("uri", "session__session_id", "session__client_name")
    list_select_related = ("session",)
    ordering = ("-created_unix",)
    fields = ("session", "uri", "rel_path", "subscribed")
    readonly_fields = fields

    @admin.display(description="subscribed", ordering="created_unix")
    def subscribed(self, obj):
        return _stamp(obj.created_unix)
