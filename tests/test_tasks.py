"""Ingestion as Celery tasks, run eagerly in this process (no broker).

The dispatching coordinator and the worker task must build exactly what the
single-process indexer builds, count every document once, and write nothing
twice when a task is delivered again. tests/test_scaleout_workers.py runs
the same code on real worker processes with Redis and PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.conf import settings

from corpus.events import Reporter
from corpus.index.dense.embedding import dense_store
from corpus.ingest.discover import walk
from corpus.ingest.distributed import Dispatch, WorkerRuntime, ingest
from corpus.ingest.indexing import walking_indexer
from corpus.ingest.pipeline import Indexer, LocalWrite
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob, JobItem, Span, Worker
from corpus.store import wipe_index
from corpus.tasks import ingest_paths
from kernel import errors
from kernel.config import build_config
from kernel.state import StateDir
from tests.support import zip_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def state(tmp_path: Path) -> StateDir:
    state = StateDir(tmp_path / "state")
    state.ensure()
    return state


@pytest.fixture
def runtime(corpus_dir, state):
    rt = WorkerRuntime(corpus_dir, state, build_config({}, {}, {}), None)
    WorkerRuntime.install(rt)
    yield rt
    WorkerRuntime.install(None)


@pytest.fixture
def dispatched(corpus_dir, state, runtime) -> tuple[str, list[str]]:
    """A job whose first batch of paths was sent (and not yet run)."""
    fill(corpus_dir)
    sent: list[tuple[str, list[str]]] = []
    step = Dispatch(send=lambda j, p: sent.append((j, p)))
    coordinator = Indexer(corpus_dir, state, runtime.config, step=step)
    coordinator.start()
    for item in walk(coordinator.engine):
        coordinator.consume(item)
    step.send_pending(coordinator)
    return sent[0]


def dispatch(root: Path, state: StateDir, config) -> list[list[str]]:
    """A dispatched walk whose tasks run at once in this process; the
    batches of paths it sent, in order."""
    sent: list[list[str]] = []

    def send(job_id: str, paths: list[str]) -> None:
        sent.append(paths)
        ingest(job_id, paths, worker="w")

    dispatching(root, state, config, send=send).run()
    return sent


def dispatching(root: Path, state: StateDir, config, send=None, **options) -> Indexer:
    """The coordinator's indexer: it hands changed files to workers (by
    default the Celery task, run eagerly here)."""
    return Indexer(root, state, config, step=Dispatch(send=send or ingest_paths.delay), **options)


def write(root: Path, rel: str, data: str | bytes) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def fill(root: Path) -> None:
    for i in range(23):
        body = "".join(
            f"def handler_{i}_{j}(request):\n    return request.path[{j}:]\n\n" for j in range(i % 7 + 1)
        )
        write(root, f"pkg/mod_{i}.py", body)
    for i in range(9):
        write(
            root, f"docs/guide_{i}.md", f"# Guide {i}\n\n" + "The cache is invalidated on write.\n" * (i + 3)
        )
    write(
        root,
        "bundle.zip",
        zip_bytes({"inner/a.txt": "alpha member text\n", "inner/b.md": "# beta\n\nbody\n"}),
    )
    write(root, "keys.txt", "aws = AKIAABCDEFGHIJKLMNOP\n")  # a secret: skipped
    write(root, "blob.bin", bytes(range(256)) * 8)


def view() -> dict:
    """Documents, chunks and spans by path and position (ids differ per build)."""
    docs = sorted(
        Document.objects.filter(deleted=False).values_list("rel_path", "doc_type", "content_hash", "status")
    )
    chunks = sorted(
        Chunk.objects.filter(deleted=False, representation__deleted=False).values_list(
            "representation__document__rel_path", "representation__rep_type", "ordinal", "text_hash"
        )
    )
    spans = sorted(
        Span.objects.filter(chunk__deleted=False).values_list(
            "chunk__representation__document__rel_path", "chunk__ordinal", "span_kind", "start", "end"
        )
    )
    return {"documents": docs, "chunks": chunks, "spans": spans}


COUNTED = (
    "scanned",
    "indexed",
    "skipped",
    "unchanged",
    "deleted",
    "representations",
    "chunks_total",
    "errors",
)


def counted(counters) -> dict[str, int]:
    return {name: getattr(counters, name) for name in COUNTED}


def test_with_a_broker_walks_hand_their_files_to_workers(corpus_dir, state, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/15"
    assert type(walking_indexer(corpus_dir, state, build_config({}, {}, {})).step) is Dispatch


def test_without_a_broker_tasks_run_eagerly_and_walks_stay_in_process(corpus_dir, state):
    assert settings.CELERY_TASK_ALWAYS_EAGER and settings.CELERY_TASK_EAGER_PROPAGATES
    assert type(walking_indexer(corpus_dir, state, build_config({}, {}, {})).step) is LocalWrite
    assert ingest_paths.acks_late and ingest_paths.reject_on_worker_lost
    assert ingest_paths.max_retries and ingest_paths.retry_backoff


def test_dispatched_walk_builds_what_the_single_process_walk_builds(corpus_dir, state, runtime):
    fill(corpus_dir)
    config = runtime.config
    alone = Indexer(corpus_dir, state, config, mode="full").run()
    expected = view()
    assert len(expected["documents"]) >= 30 and any("!/" in d[0] for d in expected["documents"])

    wipe_index()
    spread = dispatching(corpus_dir, state, config, mode="full").run()
    assert view() == expected
    assert counted(spread) == counted(alone)
    job = IndexJob.objects.order_by("-started_unix").first()
    assert job.outcome == "complete" and not job.running and job.counters() == spread.as_dict()
    assert set(JobItem.objects.filter(job=job).values_list("state", flat=True)) == {JobItem.DONE}
    assert Worker.objects.filter(tasks_done__gt=0).exists()


def test_tasks_take_the_configured_number_of_paths(corpus_dir, state, runtime, settings):
    for i in range(7):
        write(corpus_dir, f"notes/n{i}.md", f"note {i}\n")
    settings.DIR2MCP_CELERY_TASK_PATHS = 3
    sent = dispatch(corpus_dir, state, runtime.config)

    assert [len(paths) for paths in sent] == [3, 3, 1]
    assert Document.objects.filter(status="ok").count() == 7


def test_slow_files_count_heavier_so_they_are_shared_out_a_few_to_a_task(
    corpus_dir, state, runtime, settings
):
    """A PDF, image, audio, office or archive file counts as SLOW_FILE_WEIGHT
    paths: with tasks of 32, two such files fill a task, text files go 32 at
    a time, and every file is still dispatched once."""
    from corpus.ingest.distributed import SLOW_FILE_WEIGHT, dispatch_weight

    assert SLOW_FILE_WEIGHT == 16
    for i in range(6):
        write(corpus_dir, f"scans/s{i}.pdf", b"%PDF-1.4 not really a pdf\n")
    write(corpus_dir, "bundle.zip", zip_bytes({"a.txt": "alpha\n"}))
    for i in range(70):
        write(corpus_dir, f"notes/n{i:02}.md", f"note {i}\n")
    settings.DIR2MCP_CELERY_TASK_PATHS = 32
    sent = dispatch(corpus_dir, state, runtime.config)

    weights = [sum(map(dispatch_weight, paths)) for paths in sent]
    slow = [sum(dispatch_weight(p) > 1 for p in paths) for paths in sent]
    assert all(w >= 32 for w in weights[:-1]) and all(w - 16 < 32 for w in weights), weights
    assert max(slow) == 2 and sum(slow) == 7, slow
    assert sorted(p for paths in sent for p in paths) == sorted(
        [f"scans/s{i}.pdf" for i in range(6)] + ["bundle.zip"] + [f"notes/n{i:02}.md" for i in range(70)]
    )
    assert [len(paths) for paths in sent if not any(dispatch_weight(p) > 1 for p in paths)][:1] == [32]
    assert (
        dispatch_weight("photos/IMG_1.JPG") == dispatch_weight("talk.mp3") == dispatch_weight("a.docx") == 16
    )
    assert dispatch_weight("src/main.py") == dispatch_weight("README") == 1
    # When workers embed, every file is slow next to a task's own cost.
    assert dispatch_weight("src/main.py", embeds=True) == 4 and dispatch_weight("a.pdf", embeds=True) == 16


def test_an_incremental_dispatched_walk_follows_edits_deletions_and_archives(corpus_dir, state, runtime):
    fill(corpus_dir)
    config = runtime.config
    dispatching(corpus_dir, state, config).run()
    write(corpus_dir, "pkg/mod_3.py", "def renamed(value):\n    return value\n")
    (corpus_dir / "docs/guide_2.md").unlink()
    write(corpus_dir, "bundle.zip", zip_bytes({"inner/a.txt": "alpha changed\n", "inner/c.txt": "gamma\n"}))
    again = dispatching(corpus_dir, state, config).run()
    after = view()
    assert (again.indexed, again.deleted) == (
        4,
        2,
    )  # mod_3, bundle.zip, inner/a.txt, inner/c.txt; guide_2, b.md
    paths = {d[0] for d in after["documents"]}
    assert "docs/guide_2.md" not in paths and "bundle.zip!/inner/b.md" not in paths
    assert "bundle.zip!/inner/c.txt" in paths

    wipe_index()
    Indexer(corpus_dir, state, config, mode="full").run()
    assert view() == after


def test_a_second_delivery_writes_and_counts_nothing(dispatched):
    job_id, paths = dispatched

    assert ingest(job_id, paths, worker="w1") == len(paths)
    first = (IndexJob.objects.get(job_id=job_id).counters(), view())
    assert ingest(job_id, paths, worker="w2") == 0  # redelivered: found written, nothing redone
    assert (IndexJob.objects.get(job_id=job_id).counters(), view()) == first
    assert set(JobItem.objects.filter(rel_path__in=paths).values_list("worker", flat=True)) == {"w1"}
    assert Document.objects.filter(rel_path__in=paths).count() == len(paths)


def test_a_worker_with_another_policy_fails_its_items_and_writes_nothing(dispatched, corpus_dir, state):
    job_id, paths = dispatched
    other = build_config({"ingest": {"pdf": {"mode": "off"}}}, {}, {})
    WorkerRuntime.install(WorkerRuntime(corpus_dir, state, other, None))

    assert ingest(job_id, paths, worker="stranger") == 0
    assert not Document.objects.filter(rel_path__in=paths).exists()
    failed = JobItem.objects.filter(job_id=job_id, rel_path__in=paths)
    assert set(failed.values_list("state", flat=True)) == {JobItem.FAILED}
    assert set(failed.values_list("error_code", flat=True)) == {errors.CONFIG_INVALID}
    assert all("another configuration" in e for e in failed.values_list("error", flat=True))
    assert IndexJob.objects.get(job_id=job_id).errors == len(paths)


def test_a_job_whose_files_fail_on_workers_ends_and_reports_them(corpus_dir, state, runtime):
    """A failed task must not leave the coordinator waiting for ever."""
    fill(corpus_dir)
    WorkerRuntime.install(
        WorkerRuntime(corpus_dir, state, build_config({"ingest": {"pdf": {"mode": "off"}}}, {}, {}), None)
    )
    reported: list[tuple] = []

    class Listener(Reporter):
        def file_error(self, rel_path, code, message):
            reported.append((rel_path, code))

    counters = dispatching(corpus_dir, state, runtime.config, reporter=Listener.silent()).run()
    job = IndexJob.objects.order_by("-started_unix").first()
    assert job.outcome == "complete" and not job.running
    items = JobItem.objects.filter(job=job)
    assert items.count() > 8 and set(items.values_list("state", flat=True)) == {JobItem.FAILED}
    assert counters.errors == items.count() and not Document.objects.filter(deleted=False).exists()
    assert {code for _, code in reported} == {errors.CONFIG_INVALID} and len(reported) == min(
        20, items.count()
    )


def test_an_item_that_keeps_killing_its_worker_is_given_up(dispatched):
    job_id, paths = dispatched
    # Three deliveries started and never finished: each worker died.
    JobItem.objects.filter(job_id=job_id, rel_path__in=paths).update(attempts=3)
    assert ingest(job_id, paths, worker="w4") == 0
    items = JobItem.objects.filter(job_id=job_id, rel_path__in=paths)
    assert set(items.values_list("state", flat=True)) == {JobItem.FAILED}
    assert "given up after 3 deliveries" in items.first().error
    assert items.first().error_code == errors.EXTRACT_FAILED
    assert not Document.objects.filter(rel_path__in=paths).exists()


def test_workers_embed_into_the_database_and_servers_pick_them_up(corpus_dir, state, runtime, settings):
    from corpus.index.dense.embedding import check_models
    from corpus.providers.local import LocalEmbedder

    embedder = LocalEmbedder()
    check_models(embedder, state)
    WorkerRuntime.install(WorkerRuntime(corpus_dir, state, runtime.config, embedder))
    for i in range(6):
        write(corpus_dir, f"notes/n{i}.md", f"# Note {i}\n\nThe session token rotates every {i} hours.\n")

    config = build_config({"embed": {"provider": "local"}}, {}, {})
    settings.DIR2MCP_CELERY_TASK_PATHS = 8
    sent = dispatch(corpus_dir, state, config)  # no embedder: the workers embed
    # Embedding makes every file slow next to a task's own cost: 4 paths each.
    assert [len(paths) for paths in sent] == [2, 2, 2]
    live = Chunk.objects.filter(deleted=False)
    assert live.count() > 0
    assert not live.exclude(embedding_status=EmbeddingStatus.OK).exists()
    job = IndexJob.objects.order_by("-started_unix").first()
    assert job.embedded_ok == live.count()
    # A server process never saw these vectors; its next search adds them.
    server = dense_store(state)
    index = server.sync("text")
    assert set(index.labels) >= set(live.filter(index_kind="text").values_list("chunk_id", flat=True))

    # Later batches reach it too, read by the version they were stored under.
    write(corpus_dir, "notes/late.md", "# Late\n\nA note written after the server synced.\n")
    dispatching(corpus_dir, state, runtime.config).run()
    late = set(
        Chunk.objects.filter(representation__document__rel_path="notes/late.md").values_list(
            "chunk_id", flat=True
        )
    )
    seqs = set(Chunk.objects.filter(chunk_id__in=late).values_list("embed_seq", flat=True))
    assert late and None not in seqs and min(seqs) > int(server._synced["text"])
    assert late <= set(server.sync("text").labels)
