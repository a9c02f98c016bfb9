"""Files prepared in worker processes beside the writer
(corpus/ingest/prepare_pool.py, issue #37): the same index as the serial
path, and a worker that dies costs at most its own file."""

from __future__ import annotations

import io
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, transaction

from corpus.events import Reporter
from corpus.index import lexical
from corpus.ingest import writer
from corpus.ingest.indexing import index_directory
from corpus.ingest.pipeline import Indexer
from corpus.ingest.prepare import HEAD_BYTES, Capabilities, Prepared, Preparer
from corpus.ingest.prepare_pool import PoolSetup, PreparePool, processes_for
from corpus.models import Document
from corpus.security import ExclusionEngine
from kernel import errors
from kernel.config import build_config

REPO = Path(__file__).resolve().parent.parent
#: How long a test waits for a worker to reach a state before it fails (not a timing assertion).
PATIENCE = 120.0

#: table: (primary key, {foreign key: table it points to}, columns that hold a clock time);
#: a table keyed by its foreign keys (references: document, name) has no key of its own
TABLES: dict[str, tuple[str | None, dict[str, str], set[str]]] = {
    "documents": ("doc_id", {}, {"indexed_unix"}),
    "representations": ("rep_id", {"document_id": "documents"}, {"created_unix"}),
    "chunks": ("chunk_id", {"representation_id": "representations"}, set()),
    "spans": ("id", {"chunk_id": "chunks"}, set()),
    "symbols": ("id", {"document_id": "documents"}, set()),
    "symbol_names": ("id", {}, set()),
    "symbol_references": (None, {"document_id": "documents", "name_id": "symbol_names"}, set()),
}


def config(processes: int | str):
    return build_config({"ingest": {"prepare_processes": processes}, "embed": {"provider": "none"}}, {}, {})


def real_tree(root: Path) -> Path:
    """This project's own sources and docs: Python, markdown, HTML templates: about 160 files."""
    for folder in ("corpus", "kernel", "docs", "templates"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def raw_rows() -> dict[str, list[tuple[object, ...]]]:
    """Every row the indexer wrote, as stored (texts compressed or not),
    ids replaced by their rank in their table so two builds compare."""
    ranks: dict[str, dict[object, int]] = {}
    found: dict[str, list[tuple[object, ...]]] = {}
    with connection.cursor() as cursor:
        for table, (key, _, _) in TABLES.items():
            if key is not None:
                cursor.execute(f"SELECT {key} FROM {table} ORDER BY {key}")
                ranks[table] = {row[0]: rank for rank, row in enumerate(cursor.fetchall())}
        for table, (key, foreign, clocks) in TABLES.items():
            cursor.execute(f"SELECT * FROM {table} ORDER BY {key or ', '.join(foreign)}")
            names = [column[0] for column in cursor.description]
            rows = []
            for row in cursor.fetchall():
                kept = []
                for name, value in zip(names, row, strict=True):
                    if name in clocks:
                        continue
                    if name == key:
                        value = ranks[table][value]
                    elif name in foreign:
                        value = ranks[foreign[name]][value]
                    kept.append(bytes(value) if isinstance(value, memoryview) else value)
                rows.append(tuple(kept))
            found[table] = rows if key else sorted(rows)
        # The lexical index: each term's every occurrence, by the rank of its chunk.
        cursor.execute(f"CREATE VIRTUAL TABLE temp.terms USING fts5vocab(main, {lexical.TABLE}, instance)")
        cursor.execute("SELECT term, doc, col, offset FROM temp.terms ORDER BY term, doc, offset")
        found["lexical"] = [(t, ranks["chunks"][doc], c, o) for t, doc, c, o in cursor.fetchall()]
        cursor.execute("DROP TABLE temp.terms")
    return found


def forget_everything() -> None:
    Document.objects.all().delete()  # representations, chunks, spans, symbols and references with them
    lexical.clear()


@pytest.mark.django_db
def test_a_parallel_build_stores_the_same_rows_as_a_serial_one(tmp_path, state):
    root = real_tree(tmp_path / "tree")
    serial = index_directory(root, state=state, config=config(0), mode="full")
    expected = raw_rows()
    forget_everything()

    parallel = index_directory(root, state=state, config=config(2), mode="full")

    assert parallel.indexed == serial.indexed > 100
    assert parallel.chunks_total == serial.chunks_total
    found = raw_rows()
    for table, rows in expected.items():
        assert len(found[table]) == len(rows), table
        assert found[table] == rows, table
    assert len(expected["symbol_references"]) > 1000
    # The lexical rows the workers worked out (corpus.ingest.writer.precompute)
    # are those the index's own splitter makes of the stored chunks, which is
    # also what a row is deleted by.
    lexical.rebuild()
    assert raw_rows()["lexical"] == expected["lexical"]


def prepared_tree(root: Path, *, ahead: bool) -> list[Prepared]:
    """Every file of ``root`` prepared as the indexer prepares it, with what
    the writer needs worked out ahead (as the workers do) or not (as an
    on-demand transcript or a gzip file's text comes)."""
    cfg = config(0)
    preparer = Preparer(cfg, ExclusionEngine.from_config(root, cfg), Capabilities())
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        rel_path = path.relative_to(root).as_posix()
        doc_type = preparer.classify(path.name, data[:HEAD_BYTES])
        prepared = preparer.prepare(Prepared(rel_path, "file", doc_type, len(data), 0), data)
        found.append(writer.precompute(prepared) if ahead else prepared)
    return found


@pytest.mark.django_db
def test_what_the_workers_work_out_ahead_writes_the_rows_the_writer_would(tmp_path):
    root = real_tree(tmp_path / "tree")
    rows = {}
    for ahead in (True, False):
        documents = prepared_tree(root, ahead=ahead)
        assert all((p.ahead is not None) == (ahead and p.has_text) for p in documents)
        half = len(documents) // 2
        with transaction.atomic():
            writer.write_new_documents(documents[:half])  # a batch of new documents
            for prepared in documents[half:]:  # and one at a time
                writer.write_document(prepared, None)
        rows[ahead] = raw_rows()
        forget_everything()

    assert len(rows[True]["chunks"]) > 1000
    for table, found in rows[True].items():
        assert found == rows[False][table], table


def setup_for(root: Path) -> PoolSetup:
    return PoolSetup(root, root / ".dir2mcp", config(0), Capabilities())


def code(rel_path: str, text: str) -> tuple[Prepared, bytes]:
    data = text.encode()
    return Prepared(rel_path, "file", "code", len(data), 0), data


def wait_for(condition, what: str):
    deadline = time.monotonic() + PATIENCE
    while not (found := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {PATIENCE} s")
        time.sleep(0.01)
    return found


def stopped_worker(pool: PreparePool) -> int:
    """The pool's one worker, started (it prepared a file) and stopped (SIGSTOP)."""
    assert pool.submit(*code("warm.py", "def warm():\n    return 1\n")).result(PATIENCE).status == "ok"
    pid = next(iter(pool.held()))
    os.kill(pid, signal.SIGSTOP)
    return pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" not in status.read_text()


@pytest.mark.parametrize(
    ("attempts", "victim_status"), [(1, "error"), (2, "ok")], ids=["recorded-in-error", "tried-again"]
)
def test_a_killed_worker_costs_only_the_file_it_held(tmp_path, attempts, victim_status):
    pool = PreparePool(setup_for(tmp_path), 1, attempts=attempts)
    try:
        pid = stopped_worker(pool)
        victim = pool.submit(*code("victim.py", "def victim():\n    return 2\n"))
        after = pool.submit(*code("after.py", "def after():\n    return 3\n"))
        wait_for(lambda: pool.held().get(pid) == ["victim.py", "after.py"], "file handed to the worker")
        os.kill(pid, signal.SIGKILL)

        prepared, behind = victim.result(PATIENCE), after.result(PATIENCE)
    finally:
        pool.close()

    assert prepared.status == victim_status
    if victim_status == "error":
        assert prepared.error_code == errors.EXTRACT_FAILED
        assert "killed by SIGKILL" in (prepared.error or "")
        assert prepared.drafts == []
    else:
        assert [d.text for d in prepared.drafts] and prepared.navigation is not None
    assert behind.status == "ok" and behind.navigation is not None
    assert [d.name for d in behind.navigation.definitions] == ["after"]
    assert pool.deaths == 1


def test_workers_run_at_the_writing_process_niceness_and_stop_with_the_pool(tmp_path):
    pool = PreparePool(setup_for(tmp_path), 1)
    try:
        pid = stopped_worker(pool)
        os.kill(pid, signal.SIGCONT)
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)
        futures = [pool.submit(*code(f"f{i}.py", f"def f{i}():\n    return {i}\n")) for i in range(200)]
    finally:
        pool.close()

    assert all(f.done() for f in futures)
    assert any(f.cancelled() for f in futures)  # what no worker held was not prepared
    assert all(f.result().status == "ok" for f in futures if not f.cancelled())
    assert not alive(pid)
    assert pool.submit(*code("late.py", "x = 1\n")).cancelled()


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_during_a_pass_costs_no_file_and_the_pass_completes(tmp_path, state):
    root = real_tree(tmp_path / "tree")
    indexer = Indexer(root, state, config(1))
    killed: list[str] = []
    finished = threading.Event()

    def kill_a_busy_worker() -> None:
        pool = wait_for(lambda: indexer.reader.processes or finished.is_set(), "worker pool")
        while not killed and not finished.is_set():
            held = pool.held() if isinstance(pool, PreparePool) else {}
            if not held:
                time.sleep(0.01)
                continue
            pid = next(iter(held))
            os.kill(pid, signal.SIGSTOP)
            paths = pool.held().get(pid)
            if paths:
                killed.append(paths[0])
                os.kill(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGCONT)

    killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
    killer.start()
    try:
        counters = indexer.run()
    finally:
        finished.set()
    killer.join(PATIENCE)

    assert killed, "the pass ended before a worker held a file"
    files = sum(1 for p in root.rglob("*") if p.is_file())
    assert counters.errors == 0
    assert counters.indexed + counters.skipped == files
    victim = Document.objects.get(rel_path=killed[0])
    assert victim.status == "ok" and victim.representations.get().chunks.exists()


@pytest.mark.django_db(transaction=True)
def test_a_pass_stopped_while_workers_prepare_ends_with_whole_documents_and_no_worker(tmp_path, state):
    root = real_tree(tmp_path / "tree")
    indexer = Indexer(root, state, config(2))
    workers: set[int] = set()

    def stop_once_workers_hold_files() -> None:
        pool = wait_for(lambda: indexer.reader.processes, "worker pool")
        workers.update(wait_for(lambda: {pid for pid, paths in pool.held().items() if paths}, "busy worker"))
        indexer.stop.set()

    stopper = threading.Thread(target=stop_once_workers_hold_files, daemon=True)
    stopper.start()
    counters = indexer.run()
    stopper.join(PATIENCE)

    assert workers and not any(alive(pid) for pid in workers)
    assert indexer.job is not None and indexer.job.outcome == "interrupted"
    files = sum(1 for p in root.rglob("*") if p.is_file())
    written = Document.objects.filter(status="ok")
    assert 0 < written.count() == counters.indexed < files
    assert all(doc.representations.get().chunks.exists() for doc in written if doc.size_bytes)


@pytest.mark.parametrize(
    ("setting", "cores", "expected"),
    [
        ("auto", 1, 0),
        ("auto", 2, 2),
        ("auto", 4, 4),
        ("auto", 64, 4),
        (0, 2, 0),
        (3, 2, 3),
    ],
    ids=["auto-one-core", "auto-two-cores", "auto-four-cores", "auto-capped", "off", "explicit"],
)
def test_how_many_processes_prepare(setting, cores, expected):
    assert processes_for(setting, cores) == expected


class LexicalWatch(io.StringIO):
    """The indexer's NDJSON output; at ``lexical_index_complete`` (the dense
    pass starts next) it notes which of ``workers`` still run."""

    def __init__(self) -> None:
        super().__init__()
        self.workers: set[int] = set()
        self.running_then: set[int] | None = None

    def write(self, text: str) -> int:
        if '"lexical_index_complete"' in text:
            self.running_then = {pid for pid in self.workers if alive(pid)}
        return super().write(text)


@pytest.mark.django_db(transaction=True)
def test_the_preparing_workers_stop_once_the_walk_is_written_before_the_dense_pass(tmp_path, state):
    # They held 230-240 MiB each, idle, through the whole dense pass (hours
    # on the kernel with the local model): measured in session 31.
    root = real_tree(tmp_path / "tree")
    output = LexicalWatch()
    indexer = Indexer(root, state, config(2), reporter=Reporter(output, json_mode=True))

    def note_workers() -> None:
        pool = wait_for(lambda: indexer.reader.processes, "worker pool")
        output.workers.update(wait_for(lambda: set(pool.held()), "worker"))

    watcher = threading.Thread(target=note_workers, daemon=True)
    watcher.start()
    counters = indexer.run()
    watcher.join(PATIENCE)

    assert counters.indexed > 100 and output.workers
    assert output.running_then == set()
    assert indexer.job is not None and indexer.job.outcome == "complete"
