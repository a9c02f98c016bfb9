"""The operator's views: status page, its live stream, health, metrics."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from dir2mcp_site.ops import health, metrics, snapshot
from mcp_gateway import current

#: How often the stream re-reads the database, and how long one stream lasts
#: before the browser's EventSource reconnects (it does so by itself).
POLL_SECONDS = 1.0
STREAM_SECONDS = 600.0
HEARTBEAT_EVERY = 15


@staff_member_required
@never_cache
@require_GET
def status_page(request: HttpRequest) -> HttpResponse:
    data = snapshot.snapshot()
    return render(
        request,
        "ops/status.html",
        {
            "title": "dir2mcp status",
            "snapshot": data,
            "providers": snapshot.providers(current.get()),
        },
    )


def _payload() -> str:
    return json.dumps(snapshot.snapshot(), sort_keys=True)


async def _events() -> AsyncIterator[str]:
    yield f"retry: {int(POLL_SECONDS * 2000)}\n\n"
    last, quiet = None, 0
    deadline = time.monotonic() + STREAM_SECONDS
    while time.monotonic() < deadline:
        data = await sync_to_async(_payload)()
        if data != last:
            last, quiet = data, 0
            yield f"event: status\ndata: {data}\n\n"
        else:
            quiet += 1
            if quiet >= HEARTBEAT_EVERY:  # keeps proxies from closing an idle stream
                quiet = 0
                yield ": ping\n\n"
        await asyncio.sleep(POLL_SECONDS)


@staff_member_required
@require_GET
async def status_stream(request: HttpRequest) -> StreamingHttpResponse:
    """Server-sent events: the status snapshot, each time it changes."""
    response = StreamingHttpResponse(_events(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness, plus readiness of the database, the indices and the call
    slots (503 if not ready): ``degraded`` when only the calls are behind
    (every slot taken, or calls running past their deadline), else
    ``unavailable``."""
    checks = health.readiness()
    failing = {name for name, check in checks.items() if not check["ok"]}
    status = "ok" if not failing else "degraded" if failing == {"tool_calls"} else "unavailable"
    return JsonResponse({"status": status, "checks": checks}, status=200 if not failing else 503)


@never_cache
@require_GET
def livez(request: HttpRequest) -> JsonResponse:
    """Liveness only: the process answers; touches nothing else."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Prometheus text. Beyond loopback (``up --public``) the gate in front of
    every route asks for the bearer token first (mcp_gateway/route_gate.py)."""
    return HttpResponse(metrics.exposition(), content_type=metrics.CONTENT_TYPE)
