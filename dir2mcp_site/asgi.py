"""ASGI entry point, served by daphne."""

import os

from dir2mcp_site import bootstrap

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
