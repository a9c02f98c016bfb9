import os

from dir2mcp_site import bootstrap

bootstrap.prepare([])
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dir2mcp_site.settings")

from django.core.wsgi import get_wsgi_application  # noqa: E402

application = get_wsgi_application()
