"""Prometheus metrics: the ``/metrics`` exposition.

The hooks (``observe_*``) and their counters live below every project
module in :mod:`kernel.observe`, so the gateway, the payment audit and the
provider client count without reaching up into the site; they are in the
default registry, so the exposition here includes them.
Indexing figures are not counted by hooks: :class:`IndexCollector` reads
them from the database, so they agree across processes, at most once every
:data:`INDEX_FIGURES_SECONDS` (``/metrics`` asks no token on loopback, and
counting every document and chunk is work that grows with the index).

Each daphne process keeps its own counters. With ``PROMETHEUS_MULTIPROC_DIR``
set (before the process starts), prometheus_client writes them to files there
and :func:`exposition` merges every process's (docs/deploy.md).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import REGISTRY

from corpus.models import Chunk, Document, IndexJob

CONTENT_TYPE = CONTENT_TYPE_LATEST


#: how long the index figures of a scrape are kept for the next ones: until
#: session 21 each request to ``/metrics`` (no token on loopback: any local
#: user, or a web page's no-cors GET) counted every document and chunk
INDEX_FIGURES_SECONDS = 15.0


class IndexCollector:
    """Indexing figures read from the database, at most once every
    :data:`INDEX_FIGURES_SECONDS` (scrapes meanwhile get the same figures)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kept: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        with self.lock:  # one count at a time: scrapes meanwhile wait for it
            now = time.monotonic()
            if self.kept is None or now - self.kept[0] >= INDEX_FIGURES_SECONDS:
                self.kept = (now, list(self.read()))
            return iter(self.kept[1])

    def read(self) -> Iterator[Metric]:
        from django.db.models import Count

        docs = GaugeMetricFamily(
            "dir2mcp_documents", "Live documents by type and status.", labels=["doc_type", "status"]
        )
        rows = Document.objects.filter(deleted=False).values("doc_type", "status").annotate(n=Count("doc_id"))
        for row in rows.order_by("doc_type", "status"):
            docs.add_metric([row["doc_type"], row["status"]], row["n"])
        yield docs

        chunks = GaugeMetricFamily(
            "dir2mcp_chunks", "Live chunks by embedding status.", labels=["embedding_status"]
        )
        chunk_rows = (
            Chunk.objects.filter(deleted=False).values("embedding_status").annotate(n=Count("chunk_id"))
        )
        for chunk_row in chunk_rows.order_by("embedding_status"):
            chunks.add_metric([chunk_row["embedding_status"]], chunk_row["n"])
        yield chunks

        jobs = CounterMetricFamily("dir2mcp_index_jobs", "Indexing jobs by outcome.", labels=["outcome"])
        job_rows = IndexJob.objects.values("outcome").annotate(n=Count("job_id"))
        for job_row in job_rows.order_by("outcome"):
            jobs.add_metric([job_row["outcome"] or "running"], job_row["n"])
        yield jobs

        yield from _latest_job_metrics(IndexJob.objects.order_by("-started_unix").first())


def _latest_job_metrics(job: IndexJob | None) -> Iterator[Metric]:
    running = GaugeMetricFamily("dir2mcp_index_job_running", "1 while the latest indexing job runs.")
    running.add_metric([], 1 if job is not None and job.running else 0)
    yield running
    files = GaugeMetricFamily(
        "dir2mcp_index_job_progress", "Counters of the latest indexing job.", labels=["counter"]
    )
    if job is not None:
        for name, value in job.counters().items():
            files.add_metric([name], value)
    yield files


_index_collector = IndexCollector()


def exposition() -> bytes:
    """The whole scrape in the Prometheus text format."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = CollectorRegistry()
        registry.register(_DefaultRegistry())
    registry.register(_index_collector)
    return generate_latest(registry)


class _DefaultRegistry:
    """This process's own metrics (the hooks' counters, process and GC figures)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()
