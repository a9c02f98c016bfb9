from django.urls import path

from dir2mcp_site.ops import views

app_name = "ops"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("healthz/live", views.livez, name="livez"),
    path("metrics", views.metrics_view, name="metrics"),
    path("ops/status/", views.status_page, name="status"),
    path("ops/status/stream", views.status_stream, name="status-stream"),
]
