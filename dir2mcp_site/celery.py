"""The Celery app. Without CELERY_BROKER_URL tasks run eagerly in-process."""

from __future__ import annotations

import os

from celery import Celery

from dir2mcp_site import bootstrap
from dir2mcp_site.cli import load_settings_or_exit

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")
load_settings_or_exit()  # a bad setting: one CONFIG_INVALID line and exit 2, as for `dir2mcp`

app = Celery("dir2mcp_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
