"""The worker's entry (``celery -A dir2mcp_site worker``): the process's
root and settings chosen, then the tasks found on the app
(corpus.celery_app). Without CELERY_BROKER_URL tasks run eagerly in-process."""

from __future__ import annotations

import os

from dir2mcp_site import bootstrap
from dir2mcp_site.cli import load_settings_or_exit

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")
load_settings_or_exit()  # a bad setting: one CONFIG_INVALID line and exit 2, as for `dir2mcp`

# Only now: Celery installs its Django fixup (django.setup() in the worker,
# tasks found in INSTALLED_APPS) when the app is made with the settings named.
from corpus.celery_app import app  # noqa: E402

app.autodiscover_tasks()
