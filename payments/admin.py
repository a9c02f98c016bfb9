"""Settlement logs in the admin: read-only, filterable, with totals and CSV export."""

from __future__ import annotations

import io

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path

from kernel.admin import ReadOnlyAdmin
from payments import reports
from payments.models import SettlementLog


@admin.register(SettlementLog)
class SettlementLogAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "tool",
        "status",
        "price",
        "amount",
        "network",
        "payer_shown",
        "transaction",
    )
    list_filter = ("status", "tool", "network", "payer_verified", ("created_at", admin.DateFieldListFilter))
    search_fields = ("payer", "transaction")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    readonly_fields = [f.name for f in SettlementLog._meta.fields]
    actions = ("export_csv",)
    change_list_template = "admin/payments/settlementlog/change_list.html"

    @admin.display(description="payer", ordering="payer")
    def payer_shown(self, obj: SettlementLog) -> str:
        """A payer the facilitator did not confirm is what the payment claimed: said so."""
        if obj.payer and not obj.payer_verified:
            return f"{obj.payer} (unverified)"
        return obj.payer

    def get_urls(self) -> list[URLPattern]:
        export = self.admin_site.admin_view(self.export_view)
        return [path("export.csv", export, name="payments_settlementlog_export"), *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, object] | None = None
    ) -> HttpResponse:
        response = super().changelist_view(request, extra_context=extra_context)
        context = getattr(response, "context_data", None)
        if context is not None and "cl" in context:
            context["tool_totals"] = reports.totals_per_tool(context["cl"].queryset)
        return response

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[SettlementLog]) -> HttpResponse:
        return _csv_response(queryset, "settlements-selected.csv")

    def export_view(self, request: HttpRequest) -> HttpResponse:
        """The current filters and search of the changelist, as CSV."""
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        queryset = self.get_changelist_instance(request).get_queryset(request)
        return _csv_response(queryset, "settlements.csv")


def _csv_response(queryset: QuerySet[SettlementLog], filename: str) -> HttpResponse:
    buffer = io.StringIO()
    reports.write_csv(queryset.iterator(), buffer)
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
