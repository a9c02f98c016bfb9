"""The Celery app. Without CELERY_BROKER_URL tasks run eagerly in-process."""

from __future__ import annotations

import os

from celery import Celery

from dir2mcp_site import bootstrap

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")

app = Celery("dir2mcp_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
