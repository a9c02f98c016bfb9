"""The ingestion pipeline end to end, in-process, on real files."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader

from corpus.ingest import unpack
from corpus.ingest.indexing import index_directory, refresh_paths
from corpus.models import Chunk, Document, Representation
from corpus.status import older_format_documents
from kernel import errors, state_identity
from kernel.config import build_config
from kernel.state import IndexLock, StateDir
from tests.support import texts_hold, zip_bytes

pytestmark = pytest.mark.django_db

SECRET = "AKIAABCDEFGHIJKLMNOP"


def make_config(**sections):
    return build_config(sections, {}, {})


def run(root: Path, state: StateDir, config=None, mode: str = "incremental"):
    return index_directory(root, state=state, config=config or make_config(), mode=mode)


def write(root: Path, rel: str, data: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def live_chunks(rel_path: str) -> list[Chunk]:
    return list(
        Chunk.objects.filter(representation__document__rel_path=rel_path, deleted=False)
        .prefetch_related("spans")
        .order_by("ordinal")
    )


def doc(rel_path: str) -> Document:
    return Document.objects.get(rel_path=rel_path)


def code_file(lines: int) -> str:
    return "".join(f"def function_{i}(value):\n    return value + {i}\n" for i in range(lines // 2))


def test_text_types_become_chunks_with_line_spans(corpus_dir, state):
    write(corpus_dir, "src/app.py", code_file(450))
    write(corpus_dir, "notes.md", "# Notes\n\n" + "A paragraph of prose.\n" * 300)
    write(corpus_dir, "data/config.json", '{"name": "dir2mcp"}\n')

    counters = run(corpus_dir, state)

    assert counters.indexed == 3 and counters.errors == 0
    code = live_chunks("src/app.py")
    assert [c.index_kind for c in code] == ["code"] * len(code)
    # one unit per two-line function, cited by its own lines
    spans = [(c.spans.get().start, c.spans.get().end) for c in code]
    assert spans == [(2 * i + 1, 2 * i + 2) for i in range(225)]
    source = (corpus_dir / "src/app.py").read_text().split("\n")
    first, last = spans[7]
    assert code[7].text == "\n".join(source[first - 1 : last])
    assert code[7].context == "src/app.py"
    prose = live_chunks("notes.md")
    assert len(prose) > 1 and all(c.index_kind == "text" for c in prose)
    assert all(len(c.text) <= 2500 for c in prose)
    assert doc("data/config.json").doc_type == "data"


def test_unchanged_tree_does_no_work_on_rerun(corpus_dir, state):
    for i in range(20):
        write(corpus_dir, f"pkg/m{i}.py", code_file(40))
    run(corpus_dir, state)
    before = sorted(Chunk.objects.values_list("chunk_id", "stored_text", "text_start", "text_end"))

    again = run(corpus_dir, state)

    assert again.scanned == 20
    assert again.unchanged == 20
    assert (again.indexed, again.representations, again.deleted, again.errors) == (0, 0, 0, 0)
    assert sorted(Chunk.objects.values_list("chunk_id", "stored_text", "text_start", "text_end")) == before


def test_touched_but_identical_file_is_not_reprocessed(corpus_dir, state):
    path = write(corpus_dir, "a.txt", "same text\n")
    run(corpus_dir, state)
    os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))

    again = run(corpus_dir, state)

    assert again.unchanged == 1 and again.representations == 0
    assert doc("a.txt").mtime_ns == 1_600_000_000_000_000_000


def test_edit_keeps_chunks_whose_text_survived(corpus_dir, state):
    path = write(corpus_dir, "big.py", code_file(600))
    run(corpus_dir, state)
    old = {c.text: c.chunk_id for c in live_chunks("big.py")}
    path.write_text(code_file(600).replace("return value + 100\n", "return value * 100\n"))

    again = run(corpus_dir, state)

    new = live_chunks("big.py")
    assert again.indexed == 1 and again.representations == 1
    kept = [c for c in new if old.get(c.text) == c.chunk_id]
    assert len(new) == 300 and len(kept) == 299  # only the edited function's unit changed
    assert Chunk.objects.filter(deleted=True).count() == 1


def test_full_mode_rereads_but_keeps_identical_chunks(corpus_dir, state):
    write(corpus_dir, "a.md", "# A\n\n" + "words " * 100)
    run(corpus_dir, state)
    ids = [c.chunk_id for c in live_chunks("a.md")]

    again = run(corpus_dir, state, mode="full")

    assert again.indexed == 1 and again.unchanged == 0
    assert [c.chunk_id for c in live_chunks("a.md")] == ids


def test_deleted_file_is_tombstoned_with_its_chunks(corpus_dir, state):
    write(corpus_dir, "keep.txt", "keep me\n")
    gone = write(corpus_dir, "gone.txt", "delete me\n")
    run(corpus_dir, state)
    gone.unlink()

    again = run(corpus_dir, state)

    assert again.deleted == 1
    assert doc("gone.txt").deleted is True
    assert live_chunks("gone.txt") == []
    assert Chunk.objects.filter(representation__document__rel_path="gone.txt", deleted=True).count() == 1
    assert again.chunks_total == Chunk.objects.filter(deleted=False).count() == 1


def test_file_with_secret_is_skipped_and_its_text_never_stored(corpus_dir, state):
    write(corpus_dir, "creds.txt", f"aws key {SECRET}\n")
    write(corpus_dir, "later.txt", "harmless for now\n")
    run(corpus_dir, state)
    write(corpus_dir, "later.txt", f"now it leaks {SECRET}\n")

    run(corpus_dir, state)

    for rel in ("creds.txt", "later.txt"):
        assert doc(rel).status == "skipped"
        assert doc(rel).error.startswith("SECRET_DETECTED")
        assert doc(rel).error_code == errors.SECRET_DETECTED
        assert live_chunks(rel) == []
    assert not texts_hold(Chunk, SECRET) and not texts_hold(Representation, SECRET)


def test_secret_file_names_and_gitignored_files_are_not_documents(corpus_dir, state):
    write(corpus_dir, ".env", "PASSWORD=x\n")
    write(corpus_dir, "certs/server.pem", "-----BEGIN-----\n")
    write(corpus_dir, ".gitignore", "ignored/\n")
    write(corpus_dir, "ignored/file.txt", "hidden\n")
    write(corpus_dir, "node_modules/lib/index.js", "x\n")
    write(corpus_dir, "visible.txt", "shown\n")

    run(corpus_dir, state)

    paths = set(Document.objects.values_list("rel_path", flat=True))
    assert paths == {".gitignore", "visible.txt"}


def test_newly_excluded_file_is_tombstoned(corpus_dir, state):
    write(corpus_dir, "tmp/scratch.txt", "scratch\n")
    run(corpus_dir, state)
    write(corpus_dir, ".gitignore", "tmp/\n")

    again = run(corpus_dir, state)

    assert again.deleted == 1 and doc("tmp/scratch.txt").deleted


@pytest.mark.parametrize(
    ("name", "data", "doc_type", "status", "reason"),
    [
        pytest.param(
            "blob.bin", bytes(range(256)) * 40, "binary_ignored", "skipped", "BINARY_SKIPPED", id="binary"
        ),
        pytest.param(
            "photo.png",
            b"\x89PNG\r\n\x1a\n" + b"\0" * 100,
            "image",
            "skipped",
            "needs MISTRAL_API_KEY",
            id="image-needs-key",
        ),
        pytest.param(
            "talk.mp3",
            b"ID3\x03\x00" + b"\0" * 100,
            "audio",
            "skipped",
            "needs MISTRAL_API_KEY",
            id="audio-needs-key",
        ),
        pytest.param(
            "report.docx",
            b"PK\x03\x04" + b"\0" * 100,
            "office",
            "error",
            "EXTRACT_FAILED",
            id="broken-office",
        ),
        pytest.param(
            "legacy.doc",
            b"\xd0\xcf\x11\xe0" + b"\0" * 100,
            "office",
            "skipped",
            "DOC_TYPE_UNSUPPORTED",
            id="legacy-office",
        ),
        pytest.param(
            "broken.pdf", b"%PDF-1.4\nnot really a pdf", "pdf", "error", "EXTRACT_FAILED", id="broken-pdf"
        ),
        pytest.param(
            "latin1.txt",
            "caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1"),
            "text",
            "ok",
            None,
            id="invalid-utf8",
        ),
    ],
)
def test_each_kind_of_file_gets_a_clear_status(
    corpus_dir, state, monkeypatch, name, data, doc_type, status, reason
):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    write(corpus_dir, name, data)
    write(corpus_dir, "fine.txt", "the run goes on\n")

    counters = run(corpus_dir, state)

    d = doc(name)
    assert (d.doc_type, d.status) == (doc_type, status)
    if reason:
        assert reason in d.error
    assert doc("fine.txt").status == "ok"
    assert counters.scanned == 2


def test_decoded_latin1_text_is_searchable_text(corpus_dir, state):
    write(corpus_dir, "latin1.txt", "caf\xe9 cr\xe8me\n".encode("latin-1"))
    run(corpus_dir, state)
    assert live_chunks("latin1.txt")[0].text.startswith("café crème")


def test_files_over_the_type_limit_are_skipped_without_reading(corpus_dir, state):
    write(corpus_dir, "huge.py", "x = 1\n" * 300_000)  # 1.8 MB
    config = make_config(ingest={"max_file_mb_by_type": {"code": 1}})

    run(corpus_dir, state, config)

    assert doc("huge.py").status == "skipped"
    assert doc("huge.py").error.startswith("FILE_TOO_LARGE")
    assert doc("huge.py").error_code == errors.FILE_TOO_LARGE


def test_needs_key_files_are_retried_when_a_key_appears(corpus_dir, state, monkeypatch):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    write(corpus_dir, "scan.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    run(corpus_dir, state)
    assert (doc("scan.png").error, doc("scan.png").error_code) == ("needs MISTRAL_API_KEY", "")

    monkeypatch.setenv("MISTRAL_API_KEY", "test-key-not-real")
    again = run(corpus_dir, state)

    assert again.unchanged == 0
    assert doc("scan.png").error != "needs MISTRAL_API_KEY"


def test_pdf_mode_off_skips_pdfs(corpus_dir, state):
    write(corpus_dir, "paper.pdf", b"%PDF-1.4\n")
    run(corpus_dir, state, make_config(ingest={"pdf": {"mode": "off"}}))
    assert doc("paper.pdf").error == "disabled by ingest.pdf.mode=off"


def test_archive_members_become_documents(corpus_dir, state):
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as tar:
        payload = b"nested tar member\n"
        info = tarfile.TarInfo("deep/readme.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    write(
        corpus_dir,
        "bundle.zip",
        zip_deflated({"a/notes.md": b"# Notes\n\nzipped\n", "inner.tgz": inner.getvalue()}),
    )

    run(corpus_dir, state)

    assert doc("bundle.zip").doc_type == "archive"
    member = doc("bundle.zip!/a/notes.md")
    assert member.source_type == "archive_member" and member.status == "ok"
    assert live_chunks("bundle.zip!/a/notes.md")[0].text.startswith("# Notes")
    assert live_chunks("bundle.zip!/inner.tgz!/deep/readme.txt")[0].text == "nested tar member"


def test_unchanged_archive_keeps_its_members_and_changed_one_drops_old(corpus_dir, state):
    path = write(corpus_dir, "bundle.zip", zip_deflated({"one.txt": b"one\n", "two.txt": b"two\n"}))
    run(corpus_dir, state)
    again = run(corpus_dir, state)
    assert again.deleted == 0 and again.unchanged == 3

    path.write_bytes(zip_deflated({"one.txt": b"one\n"}))
    third = run(corpus_dir, state)

    assert third.deleted == 1 and doc("bundle.zip!/two.txt").deleted
    assert not doc("bundle.zip!/one.txt").deleted


def test_hostile_archive_members_are_rejected_and_nothing_escapes(corpus_dir, state, tmp_path):
    write(
        corpus_dir,
        "evil.zip",
        zip_deflated({"../escape.txt": b"x", "/etc/abs.txt": b"y", "ok.txt": b"fine\n"}),
    )
    write(corpus_dir, "bomb.zip", zip_deflated({"zeros.txt": b"\0" * (30 * 2**20)}))

    counters = run(corpus_dir, state, make_config(ingest={"archives": {"max_total_mb": 8}}))

    paths = set(Document.objects.values_list("rel_path", flat=True))
    assert "evil.zip!/ok.txt" in paths
    assert not any("escape" in p or "abs.txt" in p or "zeros" in p for p in paths)
    assert counters.errors >= 3
    assert not (tmp_path / "escape.txt").exists()


def test_symlinks_are_not_followed_by_default(corpus_dir, state, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside the root\n")
    (corpus_dir / "link.txt").symlink_to(outside)
    (corpus_dir / "loop").symlink_to(corpus_dir)
    write(corpus_dir, "real.txt", "real\n")

    run(corpus_dir, state)

    assert set(Document.objects.values_list("rel_path", flat=True)) == {"real.txt"}


def test_followed_symlinks_stay_inside_the_root(corpus_dir, state, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("outside the root\n")
    write(corpus_dir, "real/inner.txt", "inside\n")
    (corpus_dir / "escape.txt").symlink_to(outside)
    (corpus_dir / "alias").symlink_to(corpus_dir / "real")
    (corpus_dir / "real" / "loop").symlink_to(corpus_dir)

    counters = run(corpus_dir, state, make_config(ingest={"follow_symlinks": True}))

    paths = set(Document.objects.values_list("rel_path", flat=True))
    assert "escape.txt" not in paths
    assert {"real/inner.txt", "alias/inner.txt"} <= paths
    assert not texts_hold(Chunk, "outside the root")
    assert counters.errors >= 1


def test_second_indexer_on_the_same_state_is_refused(corpus_dir, state):
    write(corpus_dir, "a.txt", "a\n")
    with IndexLock(state):
        with pytest.raises(errors.Dir2mcpError) as excinfo:
            run(corpus_dir, state)
    assert excinfo.value.code == errors.INDEX_LOCKED
    assert str(os.getpid()) in excinfo.value.message
    assert not Document.objects.exists()


def test_progress_counters_are_persisted_for_other_processes(corpus_dir, state):
    from corpus.models import IndexJob
    from kernel.state import read_json

    for i in range(5):
        write(corpus_dir, f"f{i}.txt", f"file {i}\n")
    run(corpus_dir, state)

    job = IndexJob.objects.get()
    assert (job.running, job.outcome, job.scanned, job.indexed) == (False, "complete", 5, 5)
    summary = read_json(state.corpus_json)
    assert summary["indexing"]["indexed"] == 5
    assert summary["profile"]["doc_counts"] == {"text": 5}


def test_file_name_that_is_not_utf8_is_reported_not_fatal(corpus_dir, state):
    name = os.fsdecode(b"caf\xe9.txt")  # a latin-1 name: a surrogate escape in Python
    (corpus_dir / name).write_text("content\n")
    write(corpus_dir, "fine.txt", "fine\n")

    counters = run(corpus_dir, state)

    assert counters.errors == 1 and counters.indexed == 1
    rows = dict(Document.objects.values_list("rel_path", "status"))
    assert rows == {"fine.txt": "ok", "caf\\xe9.txt": "error"}  # recorded by its escaped name
    again = run(corpus_dir, state)  # recorded again, not tombstoned as unseen
    assert (again.errors, again.deleted) == (1, 0)
    assert Document.objects.get(rel_path="caf\\xe9.txt").deleted is False
    (corpus_dir / name).unlink()
    assert run(corpus_dir, state).deleted == 1
    assert Document.objects.get(rel_path="caf\\xe9.txt").deleted is True


def test_refreshing_a_directory_and_a_file_inside_it_together(corpus_dir, state):
    write(corpus_dir, "sub/a.txt", "a\n")
    write(corpus_dir, "sub/b.txt", "b\n")

    counters = refresh_paths(corpus_dir, ["sub", "sub/a.txt"], state=state, config=make_config())

    assert counters.indexed == 2 and counters.errors == 0
    assert set(Document.objects.values_list("rel_path", flat=True)) == {"sub/a.txt", "sub/b.txt"}


def test_configured_secret_and_token_files_are_never_indexed(corpus_dir, state):
    write(corpus_dir, "keys/secret.env", "MISTRAL_API_KEY=abcdefabcdefabcdefabcdefabcdefab\n").chmod(0o600)
    write(corpus_dir, "auth/token.txt", "plain-token-value\n").chmod(0o600)
    write(corpus_dir, "notes.txt", "notes\n")
    config = make_config(
        secrets={"file": {"path": "keys/secret.env"}}, security={"auth": {"token_file": "auth/token.txt"}}
    )

    run(corpus_dir, state, config)

    assert set(Document.objects.values_list("rel_path", flat=True)) == {"notes.txt"}


def test_pdf_text_layer_is_indexed_per_page_without_a_key(corpus_dir, state, monkeypatch):
    from tests.samples import make_pdf

    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    write(corpus_dir, "paper.pdf", make_pdf(["Alpha page one", None, "Gamma page three"]))

    run(corpus_dir, state)

    d = doc("paper.pdf")
    assert (d.doc_type, d.status) == ("pdf", "ok")
    chunks = live_chunks("paper.pdf")
    assert [(c.spans.get().span_kind, c.spans.get().start) for c in chunks] == [("page", 1), ("page", 3)]
    assert "Alpha page one" in chunks[0].text and "Gamma page three" in chunks[1].text
    rep = Representation.objects.get(document=d)
    assert rep.text.split("\f")[2].strip() == "Gamma page three"
    assert rep.meta_json["pages_without_text"] == [2]
    assert rep.meta_json["ocr_pending"] == "needs MISTRAL_API_KEY"


def test_pdf_without_any_text_waits_for_ocr(corpus_dir, state, monkeypatch):
    from tests.samples import make_pdf

    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    write(corpus_dir, "scan.pdf", make_pdf([None, None]))
    run(corpus_dir, state)
    assert (doc("scan.pdf").status, doc("scan.pdf").error) == ("skipped", "needs MISTRAL_API_KEY")


def test_unchanged_nested_archive_inside_a_changed_one_is_counted_once(corpus_dir, state):
    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as tar:
        payload = b"nested\n"
        info = tarfile.TarInfo("deep/readme.txt")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    nested = inner.getvalue()
    path = write(corpus_dir, "bundle.zip", zip_deflated({"a.txt": b"one\n", "inner.tgz": nested}))
    run(corpus_dir, state)
    path.write_bytes(zip_deflated({"a.txt": b"two\n", "inner.tgz": nested}))

    again = run(corpus_dir, state)

    # bundle.zip, a.txt, inner.tgz, inner.tgz!/deep/readme.txt: each once
    assert again.scanned == 4
    assert again.deleted == 0 and not doc("bundle.zip!/inner.tgz!/deep/readme.txt").deleted


def test_a_key_in_the_secret_file_counts_as_a_key_appearing(corpus_dir, state, monkeypatch):
    monkeypatch.delenv("MISTRAL_API_KEY", raising=False)
    write(corpus_dir, "scan.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    run(corpus_dir, state)
    assert doc("scan.png").error == "needs MISTRAL_API_KEY"
    secret_file = corpus_dir / ".dir2mcp" / "secret.env"  # secrets.file.path, relative to the root
    secret_file.parent.mkdir()
    state_identity.claim(secret_file.parent)  # made by dir2mcp: one made by hand is refused
    secret_file.write_text("MISTRAL_API_KEY=from-the-secret-file\n")
    secret_file.chmod(0o600)

    again = run(corpus_dir, state)

    assert again.unchanged == 0
    assert doc("scan.png").error != "needs MISTRAL_API_KEY"


def test_a_new_document_the_store_refuses_costs_only_itself(corpus_dir, state):
    """New documents are written together; when the store refuses one of them
    (here a trigger, as a constraint or a full disk would), the rest are
    written one by one and only that one is an error."""
    from django.db import connection

    from corpus.index import lexical

    for i in range(6):
        write(corpus_dir, f"notes/n{i}.md", f"# Note {i}\n\nplain words number {i}\n")
    write(corpus_dir, "notes/poison.md", "# Poison\n\nthe store refuses poisonword\n")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON representations "
            "WHEN NEW.text LIKE '%poisonword%' BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )

    counters = run(corpus_dir, state)

    assert (counters.indexed, counters.errors) == (6, 1)
    assert doc("notes/poison.md").status == "error"
    assert "refused" in doc("notes/poison.md").error
    assert doc("notes/poison.md").error_code == errors.EXTRACT_FAILED
    assert not live_chunks("notes/poison.md")
    for i in range(6):
        assert doc(f"notes/n{i}.md").status == "ok"
        assert [c.text for c in live_chunks(f"notes/n{i}.md")] == [f"# Note {i}\n\nplain words number {i}"]
    live = set(Chunk.objects.filter(deleted=False).values_list("chunk_id", flat=True))
    assert lexical.indexed_ids() == live and len(live) == 6
    assert counters.chunks_total == 6


def test_documents_cut_by_an_older_format_serve_until_a_pass_recuts_them(corpus_dir, state):
    for i in range(3):
        write(corpus_dir, f"pkg/m{i}.py", code_file(10))
    run(corpus_dir, state)
    assert older_format_documents() == 0
    # What an index built before units looks like: no context, another policy.
    Chunk.objects.filter(representation__document__rel_path="pkg/m1.py").update(context="")
    Document.objects.filter(rel_path="pkg/m1.py").update(policy_hash="older")
    Representation.objects.filter(document__rel_path="pkg/m1.py").update(rep_hash="older")
    assert older_format_documents() == 1

    again = run(corpus_dir, state)

    assert again.indexed == 1 and older_format_documents() == 0
    assert all(c.context == "pkg/m1.py" for c in live_chunks("pkg/m1.py"))


def zip_deflated(members: dict[str, bytes]) -> bytes:
    return zip_bytes(members, zipfile.ZIP_DEFLATED)


# -- the error_code column (migration 0012) --------------------------------------------------

BEFORE, AFTER = ("corpus", "0011_chunk_context"), ("corpus", "0012_error_code")


def _executor() -> MigrationExecutor:
    """An executor that sees 0011 and 0012 themselves: a new database is made
    by the migration that replaces 0001-0018 (0001_squashed_0018_drop_symbol_name_index),
    and Django's own loader then shows only that one."""
    executor = MigrationExecutor(connection)
    executor.loader = MigrationLoader(connection, replace_migrations=False)
    return executor


def _migrate(target: tuple[str, str]):
    """Migrate the corpus app to ``target``; the models as they were there."""
    executor = _executor()
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.mark.django_db(transaction=True)
def test_the_error_code_migration_splits_old_errors_once_and_folds_them_back():
    old = _migrate(BEFORE)
    documents, items = old.get_model("corpus", "Document"), old.get_model("corpus", "JobItem")
    job = old.get_model("corpus", "IndexJob").objects.create(job_id="j1")
    documents.objects.create(
        rel_path="bad.pdf", doc_type="pdf", status="error", error="EXTRACT_FAILED: no xref"
    )
    documents.objects.create(
        rel_path="k.txt", doc_type="text", status="skipped", error="SECRET_DETECTED: aws"
    )
    documents.objects.create(
        rel_path="a.wav", doc_type="audio", status="skipped", error="needs a key: set it"
    )
    items.objects.create(job=job, rel_path="x", state="failed", error="CONFIG_INVALID: another config")
    items.objects.create(job=job, rel_path="y", state="failed", error="given up after 3 deliveries")
    try:
        new = _migrate(AFTER)
        rows = new.get_model("corpus", "Document").objects.values_list("rel_path", "error_code", "error")
        assert set(rows) == {
            ("bad.pdf", errors.EXTRACT_FAILED, "EXTRACT_FAILED: no xref"),
            ("k.txt", errors.SECRET_DETECTED, "SECRET_DETECTED: aws"),
            ("a.wav", "", "needs a key: set it"),
        }
        failed = new.get_model("corpus", "JobItem").objects.values_list("rel_path", "error_code", "error")
        assert set(failed) == {
            ("x", errors.CONFIG_INVALID, "another config"),
            ("y", errors.EXTRACT_FAILED, "given up after 3 deliveries"),
        }
        back = _migrate(BEFORE).get_model("corpus", "JobItem").objects.values_list("rel_path", "error")
        assert set(back) == {
            ("x", "CONFIG_INVALID: another config"),
            ("y", "EXTRACT_FAILED: given up after 3 deliveries"),
        }
    finally:
        executor = _executor()
        executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.parametrize(("count", "indexed"), [(8, 8), (12, 0)])
def test_an_archive_too_large_to_hold_is_read_again_and_judged_the_same(
    corpus_dir, state, monkeypatch, count, indexed
):
    # Nothing is held past 100 bytes: every archive takes the second read.
    monkeypatch.setattr(unpack, "HELD_MEMBER_BYTES", 100)
    members = {f"f{i:02}.txt": f"member {i} " * 5 for i in range(count)}
    write(corpus_dir, "bundle.zip", zip_bytes(members))
    config = make_config(ingest={"archives": {"mode": "deep", "max_members": 10}})

    counters = run(corpus_dir, state, config)

    live = dict(Document.objects.filter(deleted=False).values_list("rel_path", "status"))
    assert sum(path.startswith("bundle.zip!/") for path in live) == indexed
    assert live["bundle.zip"] == ("ok" if indexed else "skipped")
    assert counters.errors == 0
