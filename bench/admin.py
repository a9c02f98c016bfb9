"""Admin benchmark (not a test): the operator's pages on a large index.

    python bench/admin.py [--docs 10000] [--chunks-per-doc 10] [--runs 9]

Builds a fresh state directory with ``--docs`` documents (2% of them in
``error``), one representation each (4 KB of extracted text) and
``--chunks-per-doc`` chunks each (about 400 characters of real standard
library lines, one line span each): 100,000 chunks by default. Rows are
bulk-inserted in SQL batches, not indexed through the pipeline.

Then, signed in as a superuser through Django's test client (the full
middleware stack, sessions and all), it times each admin page and the
status page: p50 of ``--runs`` requests after one warm-up, and the number of
SQL queries the page ran. Two references are measured in the same run:

- for each page, the raw ORM queries for the rows the page shows (the
  document list's first 100 rows and their chunk counts, a document's
  representations and 21 chunks with their spans, the text search's count
  and first 100 rows, the status snapshot, the metrics exposition),
  in-process, without HTTP or templates; the ratio page / reference says how
  much the admin adds on top of the query it cannot avoid;
- a plain Django view behind the same client and middleware that runs
  ``SELECT count(*)`` on the chunk table: the floor of any signed-in request
  that touches the database.

Results go to bench/results/ and stdout as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import sysconfig
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The chunk list searches by path: chunk text is stored compressed (corpus/packed.py).
SEARCH_TERM = "deprecated"
DOC_TYPES = ("code", "md", "text", "pdf", "html")


def setup_django(root: Path, state: Path) -> None:
    from dir2mcp_site import bootstrap

    os.environ["DJANGO_ALLOWED_HOSTS"] = "testserver,127.0.0.1,localhost"
    bootstrap.prepare(["--dir", str(root), "--state-dir", str(state)])
    import django

    django.setup()


def stdlib_lines() -> list[str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    for path in sorted(lib.glob("*.py")):
        lines.extend(line for line in path.read_text(errors="replace").splitlines() if line.strip())
    return lines


def build(docs: int, per_doc: int) -> None:
    """``docs`` documents with one representation and ``per_doc`` chunks each."""
    from django.db import transaction

    from corpus.models import Chunk, Document, Representation, Span

    lines = stdlib_lines()
    batch = 1000
    now = int(time.time())
    for start in range(0, docs, batch):
        ids = range(start, min(start + batch, docs))
        with transaction.atomic():
            made = Document.objects.bulk_create(
                Document(
                    rel_path=f"pkg{i % 100:03d}/file_{i:06d}.{DOC_TYPES[i % len(DOC_TYPES)]}",
                    doc_type=DOC_TYPES[i % len(DOC_TYPES)],
                    size_bytes=4096 + i,
                    mtime_unix=now - i,
                    content_hash=f"{i:064x}",
                    status="error" if i % 50 == 0 else "ok",
                    error="EXTRACT_FAILED: synthetic" if i % 50 == 0 else None,
                    indexed_unix=now,
                )
                for i in ids
            )
            reps = Representation.objects.bulk_create(
                Representation(
                    document=doc,
                    rep_type="raw_text",
                    rep_hash=doc.content_hash,
                    created_unix=now,
                    text="\n".join(lines[(doc.doc_id * 60) % (len(lines) - 60) :][:60])[:4096],
                )
                for doc in made
            )
            chunks = []
            for rep in reps:
                for ordinal in range(per_doc):
                    at = (rep.rep_id * per_doc + ordinal) * 6 % (len(lines) - 6)
                    chunks.append(
                        Chunk(
                            representation=rep,
                            ordinal=ordinal,
                            text="\n".join(lines[at : at + 6])[:400],
                            tokens_est=100,
                            index_kind="text",
                        )
                    )
            chunks = Chunk.objects.bulk_create(chunks)
            Span.objects.bulk_create(
                Span(chunk=c, span_kind="lines", start=c.ordinal * 6 + 1, end=c.ordinal * 6 + 6)
                for c in chunks
            )


def p50_ms(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


def count_queries(fn) -> int:
    """How many SQL statements ``fn()`` runs (the test client resets Django's own log)."""
    from django.db import connection

    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        fn()
    return len(seen)


def reference_queries(doc_id: int) -> dict:
    """The raw ORM work behind each page, as callables."""
    from django.db.models import Count, Prefetch

    from corpus.models import Chunk, Document, Representation, Span
    from dir2mcp_site.ops import metrics, snapshot

    def document_list(**filters):
        def run():
            rows = list(Document.objects.filter(**filters).order_by("rel_path")[:101])
            per_doc = Chunk.objects.filter(representation__document__in=[d.pk for d in rows])
            return rows, dict(per_doc.values_list("representation__document").annotate(n=Count("pk")))

        return run

    def chunk_rows(qs):
        qs = qs.select_related("representation__document").defer("embedding")
        qs = qs.prefetch_related(Prefetch("spans", queryset=Span.objects.order_by("start")))
        return list(qs.order_by("chunk_id")[:101])

    def document_detail():
        Document.objects.get(pk=doc_id)
        list(Representation.objects.filter(document_id=doc_id).annotate(n=Count("chunks")))
        chunk_rows(Chunk.objects.filter(representation__document_id=doc_id))

    def search():
        qs = Chunk.objects.filter(representation__document__rel_path__icontains=SEARCH_TERM)
        qs.count()  # the paginator's count of the matches
        chunk_rows(qs)

    return {
        "document list": document_list(),
        "documents filtered by status": document_list(status="error"),
        "document detail": document_detail,
        "chunk list": lambda: chunk_rows(Chunk.objects.all()),
        "chunk search (by path: the text is compressed)": search,
        "a document's chunks": lambda: chunk_rows(Chunk.objects.filter(representation__document_id=doc_id)),
        "status page": snapshot.snapshot,
        "/metrics": metrics.exposition,
    }


def install_reference_view() -> None:
    """``/bench/count``: a plain view doing ``SELECT count(*)``, beside the real URLs."""
    from django.conf import settings
    from django.contrib.admin.views.decorators import staff_member_required
    from django.db import connection
    from django.http import HttpResponse
    from django.urls import clear_url_caches, include, path

    from corpus.models import Chunk

    @staff_member_required
    def count_view(request):
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM {Chunk._meta.db_table}")
            return HttpResponse(str(cursor.fetchone()[0]), content_type="text/plain")

    module = types.ModuleType("bench_admin_urls")
    module.urlpatterns = [path("bench/count", count_view), path("", include("dir2mcp_site.urls"))]
    sys.modules[module.__name__] = module
    settings.ROOT_URLCONF = module.__name__
    clear_url_caches()


def run(docs: int, per_doc: int, runs: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="dir2mcp-admin-bench-"))
    root, state_dir = work / "root", work / "state"
    root.mkdir()
    setup_django(root, state_dir)
    from django.contrib.auth import get_user_model
    from django.test import Client

    from corpus.models import Chunk, Document
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir
    from mcp_gateway import context, current

    state = StateDir(state_dir)
    open_store(state)
    started = time.perf_counter()
    build(docs, per_doc)
    build_s = time.perf_counter() - started
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    current.install(context.build(root=root, state=state, config=config, auth_spec="none"))
    install_reference_view()

    client = Client()
    client.force_login(get_user_model().objects.create_superuser("bench", password="bench-password-1"))
    doc_id = Document.objects.order_by("rel_path").values_list("doc_id", flat=True)[docs // 2]
    pages = {
        "document list": "/admin/corpus/document/",
        "documents filtered by status": "/admin/corpus/document/?status__exact=error",
        "document detail": f"/admin/corpus/document/{doc_id}/change/",
        "chunk list": "/admin/corpus/chunk/",
        "chunk search (by path: the text is compressed)": f"/admin/corpus/chunk/?q={SEARCH_TERM}",
        "a document's chunks": f"/admin/corpus/chunk/?representation__document__doc_id__exact={doc_id}",
        "status page": "/ops/status/",
        "/metrics": "/metrics",
    }
    references = reference_queries(doc_id)

    def get(url):
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{url} answered {response.status_code}")
        return response

    floor_ms = p50_ms(lambda: get("/bench/count"), runs)
    results: dict = {
        "documents": docs,
        "chunks": Chunk.objects.count(),
        "search_matches": Chunk.objects.filter(
            representation__document__rel_path__icontains=SEARCH_TERM
        ).count(),
        "build_s": round(build_s, 1),
        "db_mb": round(state.meta_db.stat().st_size / 2**20, 1),
        "runs": runs,
        "reference_count_view_p50_ms": floor_ms,
        "pages": {},
    }
    for name, url in pages.items():
        queries = count_queries(lambda url=url: get(url))
        page_ms = p50_ms(lambda url=url: get(url), runs)
        ref_ms = p50_ms(references[name], runs)
        results["pages"][name] = {
            "url": url,
            "queries": queries,
            "p50_ms": page_ms,
            "reference_orm_p50_ms": ref_ms,
            "page_to_orm_ratio": round(page_ms / ref_ms, 1) if ref_ms else None,
            "page_to_count_view_ratio": round(page_ms / floor_ms, 1),
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--docs", type=int, default=10000)
    parser.add_argument("--chunks-per-doc", type=int, default=10)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    result = run(args.docs, args.chunks_per_doc, args.runs)
    result.update(
        date=time.strftime("%Y-%m-%d"),
        machine=f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} {platform.release()}",
        python=platform.python_version(),
        sqlite=sqlite3.sqlite_version,
    )
    out = REPO / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / f"admin-{time.strftime('%Y%m%dT%H%M%S')}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
