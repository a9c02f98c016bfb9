"""The corpus and session admins on the real database, with factory-built rows."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from corpus.ingest.indexing import index_directory
from corpus.models import Document, IndexJob
from kernel.config import build_config
from kernel.state import StateDir
from mcp_gateway import context, current
from mcp_gateway.models import McpSession
from tests.factories import (
    ChunkFactory,
    DocumentFactory,
    McpSessionFactory,
    RepresentationFactory,
    SpanFactory,
)

pytestmark = pytest.mark.django_db

DOCS = reverse("admin:corpus_document_changelist")
CHUNKS = reverse("admin:corpus_chunk_changelist")


def doc_with_chunks(n_chunks: int, **doc_fields) -> Document:
    rep = RepresentationFactory(document=DocumentFactory(**doc_fields), text="extracted text of the file")
    for i in range(n_chunks):
        SpanFactory(chunk=ChunkFactory(representation=rep, ordinal=i, text=f"chunk body {i}"), start=i + 1)
    return rep.document


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


def test_document_list_shows_columns_and_filters_by_type_status_and_deleted(admin_client):
    doc_with_chunks(3, rel_path="guide.md", doc_type="md")
    DocumentFactory(rel_path="scan.pdf", doc_type="pdf", status="error", error="bad xref")
    DocumentFactory(rel_path="gone.txt", doc_type="text", deleted=True)

    page = admin_client.get(DOCS).content.decode()
    assert all(name in page for name in ("guide.md", "scan.pdf", "gone.txt"))
    assert "field-chunk_count" in page and ">3<" in page

    by_type = admin_client.get(DOCS, {"doc_type": "pdf"}).content.decode()
    assert "scan.pdf" in by_type and "guide.md" not in by_type
    by_status = admin_client.get(DOCS, {"status__exact": "error"}).content.decode()
    assert "scan.pdf" in by_status and "guide.md" not in by_status
    deleted = admin_client.get(DOCS, {"deleted__exact": "1"}).content.decode()
    assert "gone.txt" in deleted and "guide.md" not in deleted
    searched = admin_client.get(DOCS, {"q": "guide"}).content.decode()
    assert "guide.md" in searched and "scan.pdf" not in searched


def test_document_list_counts_chunks_only_for_the_rows_it_shows(admin_client):
    doc_with_chunks(1, rel_path="b.md")
    doc_with_chunks(3, rel_path="a.md")
    DocumentFactory(rel_path="c.md")
    with CaptureQueriesContext(connection) as captured:
        page = admin_client.get(DOCS, {"o": "-7"}).content.decode()  # by chunk count, descending
    statements = [query["sql"] for query in captured]
    # No JOIN + GROUP BY over every chunk: the paginator's count and the type
    # filter's DISTINCT read the documents table alone (bench/admin.py).
    assert not any("GROUP BY" in sql for sql in statements)
    for sql in statements:
        if "COUNT(*)" in sql or "DISTINCT" in sql:
            assert '"chunks"' not in sql, sql
    assert page.index("a.md") < page.index("b.md") < page.index("c.md")
    counts = [int(cell.split("<", 1)[0]) for cell in page.split('<td class="field-chunk_count">')[1:]]
    assert counts == [3, 1, 0]


def test_document_detail_shows_representations_chunks_spans_and_text(admin_client):
    doc = doc_with_chunks(2, rel_path="notes/plan.md")
    page = admin_client.get(reverse("admin:corpus_document_change", args=[doc.pk])).content.decode()
    assert "notes/plan.md" in page
    assert "extracted text of the file" in page
    assert "chunk body 0" in page and "chunk body 1" in page
    assert "lines 1-1" in page and "lines 2-1" in page
    assert f"representation__document__doc_id__exact={doc.pk}" in page
    assert 'name="_save"' not in page  # read-only


def test_chunk_list_follows_the_document_link_and_searches_by_path(admin_client):
    """By path: chunk text is stored compressed on SQLite (corpus/packed.py)."""
    doc = doc_with_chunks(2, rel_path="a.md")
    doc_with_chunks(1, rel_path="b.md")
    linked = admin_client.get(CHUNKS, {"representation__document__doc_id__exact": doc.pk})
    assert linked.status_code == 200
    rows = linked.content.decode()
    assert rows.count("a.md") >= 2 and "b.md" not in rows
    found = admin_client.get(CHUNKS, {"q": "b.md"}).content.decode()
    assert found.count("b.md") >= 1 and "a.md" not in found


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(lambda doc: DOCS, id="document-list"),
        pytest.param(
            lambda doc: reverse("admin:corpus_document_change", args=[doc.pk]), id="document-detail"
        ),
        pytest.param(lambda doc: CHUNKS, id="chunk-list"),
        pytest.param(lambda doc: reverse("admin:corpus_representation_changelist"), id="representation-list"),
    ],
)
def test_admin_query_count_does_not_grow_with_rows(admin_client, url):
    first = doc_with_chunks(2)
    queries(admin_client, url(first))  # warm the per-process caches (content types) first
    small = queries(admin_client, url(first))
    for _ in range(8):
        doc_with_chunks(3)
    RepresentationFactory(document=first)
    for i in range(30):
        ChunkFactory(representation=first.representations.first(), ordinal=100 + i)
    assert queries(admin_client, url(first)) == small


def test_settings_and_sessions_are_read_only(admin_client):
    assert admin_client.get(reverse("admin:corpus_setting_add")).status_code == 403
    assert admin_client.get(reverse("admin:mcp_gateway_mcpsession_add")).status_code == 403


def test_revoke_action_ends_the_selected_sessions(admin_client):
    McpSessionFactory(session_id="sess_a")
    McpSessionFactory(session_id="sess_b")
    response = admin_client.post(
        reverse("admin:mcp_gateway_mcpsession_changelist"),
        {"action": "revoke", "_selected_action": ["sess_a"]},
        follow=True,
    )
    assert "Revoked 1 session" in response.content.decode()
    assert list(McpSession.objects.values_list("session_id", flat=True)) == ["sess_b"]


# -- re-index actions: the real pipeline in a background thread ---------------


@pytest.fixture
def served_root(tmp_path: Path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "a.md").write_text("# A\n\nalpha text\n")
    (root / "b.md").write_text("# B\n\nbeta text\n")
    state = StateDir(root / ".dir2mcp")
    state.ensure()
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    index_directory(root, state=state, config=config, mode="full")
    current.install(context.build(root=root, state=state, config=config, auth_spec="none"))
    yield root
    current.install(None)


def wait_for_admin_reindex() -> None:
    for thread in threading.enumerate():
        if thread.name == "dir2mcp-admin-reindex":
            thread.join(timeout=60)
            assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_reindex_action_rereads_the_selected_files(admin_client, served_root):
    doc = Document.objects.get(rel_path="a.md")
    jobs = IndexJob.objects.count()
    # Not followed at once: the in-memory test database locks a table a
    # reader holds while the re-index thread writes (a WAL file does not).
    admin_client.post(DOCS, {"action": "reindex_selected", "_selected_action": [doc.pk]})
    wait_for_admin_reindex()
    assert "Re-indexing 1 file(s)" in admin_client.get(DOCS).content.decode()
    job = IndexJob.objects.order_by("-started_unix").first()
    assert IndexJob.objects.count() == jobs + 1
    assert (job.mode, job.outcome, job.scanned, job.indexed) == ("full", "complete", 1, 1)


@pytest.mark.django_db(transaction=True)
def test_retry_action_reindexes_only_errored_documents(admin_client, served_root):
    Document.objects.filter(rel_path="b.md").update(status="error", error="EXTRACT_FAILED: earlier failure")
    ids = list(Document.objects.values_list("pk", flat=True))
    admin_client.post(DOCS, {"action": "retry_errored", "_selected_action": ids})
    wait_for_admin_reindex()
    assert "Re-indexing 1 file(s)" in admin_client.get(DOCS).content.decode()
    retried = Document.objects.get(rel_path="b.md")
    assert (retried.status, retried.error) == ("ok", None)
    job = IndexJob.objects.order_by("-started_unix").first()
    assert (job.mode, job.scanned, job.indexed) == ("incremental", 1, 1)


def test_retry_action_with_no_errored_documents_says_so(admin_client):
    doc = DocumentFactory()
    response = admin_client.post(DOCS, {"action": "retry_errored", "_selected_action": [doc.pk]}, follow=True)
    assert "None of the selected documents failed" in response.content.decode()


# -- createadmin: the first admin user in one step ----------------------------


def createadmin(root: Path, *args: str) -> tuple[int, str]:
    import io

    from django.core.management import call_command

    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("createadmin", "--dir", str(root), "--non-interactive", *args, stdout=out, stderr=err)
    except SystemExit as exc:
        return int(exc.code), err.getvalue()
    return 0, out.getvalue()


def test_createadmin_takes_the_password_from_the_environment(corpus_dir, monkeypatch):
    from django.contrib.auth import authenticate

    monkeypatch.setenv("DIR2MCP_ADMIN_PASSWORD", "a-Long-enough-passw0rd")
    code, out = createadmin(corpus_dir)
    assert code == 0 and "Created admin user 'admin'" in out
    user = authenticate(username="admin", password="a-Long-enough-passw0rd")
    assert user is not None and user.is_staff and user.is_superuser
    assert "a-Long-enough-passw0rd" not in out


def test_createadmin_reads_a_password_file_and_resets_an_existing_user(corpus_dir, tmp_path):
    from django.contrib.auth import authenticate

    secret = tmp_path / "pw"
    secret.write_text("first-Passw0rd-value\n")
    assert createadmin(corpus_dir, "--username", "ops", "--password-file", str(secret))[0] == 0
    secret.write_text("second-Passw0rd-value\n")
    code, out = createadmin(corpus_dir, "--username", "ops", "--password-file", str(secret))
    assert code == 0 and "Updated admin user 'ops'" in out
    assert authenticate(username="ops", password="first-Passw0rd-value") is None
    assert authenticate(username="ops", password="second-Passw0rd-value") is not None


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        pytest.param((), {}, "MISSING_FIELD", "Set DIR2MCP_ADMIN_PASSWORD", id="no-password"),
        pytest.param((), {"DIR2MCP_ADMIN_PASSWORD": "123"}, "INVALID_FIELD", "too short", id="weak-password"),
        pytest.param(("--password-file", "missing.txt"), {}, "CONFIG_INVALID", "cannot read", id="no-file"),
    ],
)
def test_createadmin_refuses_bad_input_with_a_code(corpus_dir, monkeypatch, args, env, code, message):
    monkeypatch.delenv("DIR2MCP_ADMIN_PASSWORD", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    exit_code, err = createadmin(corpus_dir, *args)
    assert exit_code != 0 and f"ERROR: {code}" in err and message in err
    assert not get_user_model().objects.exists()


@pytest.mark.django_db(transaction=True)
def test_reindex_action_refuses_while_another_process_indexes(admin_client, served_root):
    import subprocess
    import sys

    from tests.mcp_http import REPO

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from kernel.state import IndexLock, StateDir; "
            "lock = IndexLock(StateDir(Path(sys.argv[1]))); lock.acquire(); print('held', flush=True); "
            "sys.stdin.read()",
            str(served_root / ".dir2mcp"),
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        jobs = IndexJob.objects.count()
        doc = Document.objects.get(rel_path="a.md")
        response = admin_client.post(
            DOCS, {"action": "reindex_selected", "_selected_action": [doc.pk]}, follow=True
        )
        assert f"INDEX_LOCKED: another indexer (pid {holder.pid})" in response.content.decode()
        assert IndexJob.objects.count() == jobs
    finally:
        holder.communicate(input="", timeout=30)
