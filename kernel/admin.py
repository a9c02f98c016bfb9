"""What every app's admin is built on: the read-only base of the tables the
system writes, and how a unix time is shown."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest

if TYPE_CHECKING:
    # ModelAdmin is generic only in django-stubs: Django cannot subscript it at
    # run time without django-stubs-ext's monkeypatch, which is a dev-only package here.
    # Any: each subclass admins another model, and with ModelAdmin[Model] their
    # get_queryset's super() would be a QuerySet[Model], not of their model.
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


class ReadOnlyAdmin(_ModelAdmin):
    """Records the system writes (the index, sessions, settlements): shown, never edited by hand."""

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


def stamp(unix: float | None) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S") if unix else "-"
