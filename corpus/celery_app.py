"""The Celery app the tasks are bound to (DESIGN decision 8).

It reads the ``CELERY_*`` Django settings when first used, so importing it
sets nothing up. Celery adds its Django fixup when ``DJANGO_SETTINGS_MODULE``
is set as the app is made, as it is in any process that has Django.
``dir2mcp_site.celery`` is the worker's entry (``celery -A dir2mcp_site
worker``): it prepares the process, then finds the tasks on this app.
"""

from __future__ import annotations

from celery import Celery

app = Celery("dir2mcp_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
