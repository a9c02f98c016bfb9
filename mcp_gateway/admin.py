"""The gateway's operator actions in the admin: MCP sessions and their
resource subscriptions (read-only, with a revoke action), and the corpus's
document list with the actions that re-index through the gateway's
background indexer (mcp_gateway/reindex.py)."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from corpus.admin import DocumentAdmin as DocumentViews
from corpus.models import Document
from kernel import errors
from kernel.admin import ReadOnlyAdmin, stamp
from mcp_gateway import sessions
from mcp_gateway.models import McpSession, McpSubscription


@admin.register(Document)
class DocumentAdmin(DocumentViews):
    """The corpus's document views, with the re-index actions."""

    actions = ("reindex_selected", "retry_errored")

    def has_reindex_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("corpus.change_document")

    @admin.action(description="Re-index selected documents", permissions=["reindex"])
    def reindex_selected(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        self._reindex(request, queryset.values_list("rel_path", flat=True), full=True)

    @admin.action(description="Retry selected documents that failed", permissions=["reindex"])
    def retry_errored(self, request: HttpRequest, queryset: QuerySet[Document]) -> None:
        paths = list(queryset.filter(status="error").values_list("rel_path", flat=True))
        if not paths:
            self.message_user(request, "None of the selected documents failed.", messages.WARNING)
            return
        self._reindex(request, paths, full=False)

    def _reindex(self, request: HttpRequest, rel_paths: Iterable[str], *, full: bool) -> None:
        # ~30 ms to import (measured); admin autodiscovery imports this module at every setup
        from mcp_gateway import reindex

        try:
            started = reindex.start(list(rel_paths), full=full)
        except errors.Dir2mcpError as exc:
            self.message_user(request, f"{exc.code}: {exc.message}", messages.ERROR)
            return
        self.message_user(
            request,
            f"Re-indexing {len(started.paths)} file(s) in the background; the status page shows progress.",
            messages.SUCCESS,
        )


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
    def opened(self, obj: McpSession) -> str:
        return stamp(obj.created_unix)

    @admin.display(description="last seen", ordering="last_seen_unix")
    def last_seen(self, obj: McpSession) -> str:
        return stamp(obj.last_seen_unix)

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("mcp_gateway.delete_mcpsession")

    @admin.action(description="Revoke selected sessions", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[McpSession]) -> None:
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
    def subscribed(self, obj: McpSubscription) -> str:
        return stamp(obj.created_unix)
