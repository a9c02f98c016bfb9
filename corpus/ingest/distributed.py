"""Ingestion spread over Celery workers (docs/scaling.md).

With ``CELERY_BROKER_URL`` set, a walk of the whole tree is split in two:

- the coordinator (``up``, ``reindex``, ``watch``) walks, skips what is
  unchanged by size, mtime and policy, tombstones what disappeared, and
  hands every other path to the workers in small batches, then waits for
  them, showing their progress from the job's counters;
- a worker (:func:`ingest`, the ``dir2mcp.ingest_paths`` task) reads,
  extracts (OCR and transcription included), chunks and writes its paths,
  then embeds their chunks.

Each path is a :class:`~corpus.models.JobItem`. A worker locks the items it
was given, writes their documents, adds its counters to the job and marks
them ``written`` in one transaction, then embeds and marks them ``done``.
A worker killed at any point leaves either nothing or whole documents; the
redelivered task starts where the killed one stopped, so nothing is written,
counted or embedded twice.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import ClassVar

from django.conf import settings
from django.db import DatabaseError, InterfaceError, transaction
from django.db.models import F, Q

from corpus.counters import Counters
from corpus.index.dense.choice import choose_embedder
from corpus.index.dense.embedding import embed_chunks
from corpus.ingest.archives import named_like_archive
from corpus.ingest.classify import DOC_TYPES, doc_type_by_name
from corpus.ingest.discover import FileEntry
from corpus.ingest.pipeline import Indexer
from corpus.models import Chunk, Document, EmbeddingStatus, IndexJob, JobItem, Worker
from corpus.providers.base import Embedder
from corpus.status import write_corpus_json
from corpus.store import get_setting, open_store, set_setting
from kernel import errors
from kernel.config import Config, config_named, default_config_path, load_config
from kernel.secrets import resolve_secret
from kernel.state import StateDir

log = logging.getLogger(__name__)

#: How long a partial batch of paths waits before it is sent. How many
#: paths a task takes is ``DIR2MCP_CELERY_TASK_PATHS`` (default 128).
DISPATCH_SECONDS = 0.5
#: A file read by a provider or a converter (OCR, speech-to-text, office
#: documents, archives) takes seconds where a text file takes milliseconds:
#: it counts as this many paths towards a task's size, so such files are
#: shared out a few to a task (8 at the default size).
SLOW_FILE_WEIGHT = 16
SLOW_TYPES = frozenset({"pdf", "image", "audio", "office", "archive"})
#: When the workers embed, every file's chunks cost a model or provider
#: call, far more than a task's own cost: files count as this many paths
#: (32 to a task at the default size), so embedding spreads over workers.
EMBEDDED_FILE_WEIGHT = 4
#: How often the coordinator looks for the workers' last items while it
#: waits (one indexed count); its progress lines follow FLUSH_SECONDS.
WAIT_SECONDS = 0.1
#: The settings row that names the root the corpus in this database was
#: walked from: the coordinator writes it before it sends a task, and a
#: worker with another root refuses the corpus (docs/scaling.md).
ROOT_KEY = "corpus_root"


def policy_fingerprint(indexer: Indexer) -> str:
    """What every process writing one job must agree on: the policy hash of
    each document type (configuration, and which provider keys are set),
    and of one that holds a credential (``security.secret_mode``)."""
    preparer = indexer.preparer
    policies = {t: [preparer.policy_hash(t), preparer.policy_hash(t, secret=True)] for t in DOC_TYPES}
    return json.dumps(policies, sort_keys=True)


def add_to_job(job_id: str, deltas: dict[str, int]) -> None:
    """Add counter deltas to a job in one UPDATE (workers add concurrently)."""
    changes = {name: F(name) + value for name, value in deltas.items() if value}
    if changes:
        IndexJob.objects.filter(job_id=job_id).update(updated_unix=time.time(), **changes)


def _difference(now: Counters, before: Counters) -> dict[str, int]:
    return {f.name: getattr(now, f.name) - getattr(before, f.name) for f in fields(Counters)}


def _from_job(job: IndexJob) -> Counters:
    return Counters(**job.counters())


def task_paths() -> int:
    """Paths per task (``DIR2MCP_CELERY_TASK_PATHS``), a slow file counting
    as SLOW_FILE_WEIGHT. Each task costs about 20 ms of CPU (worker,
    PostgreSQL, coordinator) whatever its size, a quarter of the work of 32
    source files, so larger tasks go faster; smaller ones share a small
    tree more evenly between workers, and a killed worker's task redoes
    less."""
    return settings.DIR2MCP_CELERY_TASK_PATHS  # at least 1: settings.py refuses less


def dispatch_weight(rel_path: str, *, embeds: bool = False) -> int:
    """How many paths this file counts as towards a task's size."""
    if doc_type_by_name(rel_path) in SLOW_TYPES:
        return SLOW_FILE_WEIGHT
    return EMBEDDED_FILE_WEIGHT if embeds else 1


def with_members(field: str, rel_paths: list[str]) -> Q:
    """``field`` is one of these paths or a member of one of them (only
    paths named like archives have members)."""
    near = Q(**{f"{field}__in": rel_paths})
    for path in filter(named_like_archive, rel_paths):
        near |= Q(**{f"{field}__startswith": path + "!/"})
    return near


# -- the coordinator ----------------------------------------------------------


class Dispatch:
    """The coordinator's write step: the indexer walks as it would alone,
    but hands changed files to Celery workers instead of reading them, then
    waits for the workers.

    Its counters are the job's, read back from the database at every flush;
    what it counts itself (scanned, unchanged, deleted) is added as deltas,
    so the workers' additions are never overwritten. ``send(job_id, paths)``
    enqueues one task (corpus.tasks.ingest_paths.delay).
    """

    def __init__(self, send: Callable[[str, list[str]], object]) -> None:
        self._send = send
        self._task_paths = task_paths()
        self._pending: list[str] = []
        self._pending_weight = 0
        self._pending_started = 0.0
        self._workers_embed = False
        self._dispatched: set[str] = set()
        self._flushed = Counters()
        self._said_waiting = False

    def begin(self, indexer: Indexer) -> None:
        set_setting(ROOT_KEY, str(indexer.root))  # before any task: workers compare theirs with it
        job = indexer.job
        assert job is not None
        job.host = socket.gethostname()
        job.policy = policy_fingerprint(indexer)
        job.save(update_fields=["host", "policy"])
        # Workers make their embedder from the same configuration and keys
        # (the job's policy) as this process made its own; "auto" is on
        # when that gave one.
        provider = indexer.config.embed.provider
        self._workers_embed = provider not in ("none", "auto") or indexer.embedder is not None

    def take(self, indexer: Indexer, entry: FileEntry) -> bool:
        indexer.counters.scanned -= 1  # the worker that reads it counts it
        if not self._pending:
            self._pending_started = time.monotonic()
        self._pending.append(entry.rel_path)
        self._pending_weight += dispatch_weight(entry.rel_path, embeds=self._workers_embed)
        self._dispatched.add(entry.rel_path)
        return True

    def tick(self, indexer: Indexer) -> None:
        if self._pending_weight >= self._task_paths or (
            self._pending and time.monotonic() - self._pending_started >= DISPATCH_SECONDS
        ):
            self.send_pending(indexer)

    def send_pending(self, indexer: Indexer) -> None:
        if not self._pending:
            return
        paths, self._pending, self._pending_weight = self._pending, [], 0
        job = indexer.job
        assert job is not None
        JobItem.objects.bulk_create([JobItem(job=job, rel_path=p) for p in paths], ignore_conflicts=True)
        self._send(job.job_id, paths)

    def end_walk(self, indexer: Indexer) -> bool:
        self.send_pending(indexer)
        # Members of a dispatched archive are the worker's to keep or tombstone.
        indexer.batch.tombstone(
            [
                p
                for p in indexer.known.unseen()
                if "!/" not in p or p.split("!/", 1)[0] not in self._dispatched
            ]
        )
        if not self._wait_for_workers(indexer):
            return False
        # What the workers wrote, announced from here (their processes have no server to tell).
        indexer.batch.announce(sorted(self._dispatched), listing=bool(self._dispatched))
        # Every item finished: what a worker could not embed, and the two halves' announcements.
        indexer.embed_walked()
        return True

    def _wait_for_workers(self, indexer: Indexer) -> bool:
        """Until every dispatched path is done or failed (True), or ``stop``."""
        items = JobItem.objects.filter(job=indexer.job)
        while True:
            left = items.exclude(state__in=JobItem.FINISHED).count()
            if not left:
                break
            if not self._said_waiting:
                self._said_waiting = True
                indexer.reporter.say(f"Waiting for Celery workers: {left} files queued (docs/scaling.md).")
            indexer.flush_counters()  # the workers' progress, each FLUSH_SECONDS
            if indexer.stop.wait(WAIT_SECONDS):
                return False
        failed = items.filter(state=JobItem.FAILED).values_list("rel_path", "error_code", "error")
        for rel_path, code, message in failed[:20]:
            indexer.reporter.file_error(rel_path, code, message)
        return True

    def save_counters(self, indexer: Indexer, *, force: bool) -> None:
        job = indexer.job
        assert job is not None
        with transaction.atomic():
            add_to_job(job.job_id, _difference(indexer.counters, self._flushed))
            if not job.running:  # _finish: the outcome goes in with the last counts
                IndexJob.objects.filter(job_id=job.job_id).update(
                    running=False, outcome=job.outcome, finished_unix=job.finished_unix
                )
            IndexJob.objects.filter(job_id=job.job_id).update(updated_unix=time.time())
        job.refresh_from_db()
        indexer.counters.load(job.counters())
        self._flushed = _from_job(job)
        write_corpus_json(indexer.root, indexer.state, indexer.config, job)
        if job.running:
            indexer.reporter.progress(indexer.progress_counts())


# -- the worker ---------------------------------------------------------------


class WorkerWrite:
    """A worker's write step: its indexer reads and prepares (OCR and
    transcription included) with no transaction open and writes nothing
    until :func:`_write` commits it all in one; its counts go into the job
    once, with the writes. A worker does not walk, so it never begins a job
    or ends a walk."""

    def begin(self, indexer: Indexer) -> None:
        raise AssertionError("a worker works on a job it was given")

    def take(self, indexer: Indexer, entry: FileEntry) -> bool:
        return False

    def tick(self, indexer: Indexer) -> None:
        pass

    def save_counters(self, indexer: Indexer, *, force: bool) -> None:
        pass

    def end_walk(self, indexer: Indexer) -> bool:
        raise AssertionError("a worker does not walk")


def worker_indexer(rt: WorkerRuntime, job: IndexJob, rel_paths: list[str]) -> Indexer:
    """An indexer for a worker's share of ``job``: these paths only, counted for the job."""
    indexer = Indexer(rt.root, rt.state, rt.config, mode=job.mode, step=WorkerWrite())
    indexer.job = job
    indexer.known.load(Document.objects.filter(with_members("rel_path", rel_paths)))
    return indexer


@dataclass
class WorkerRuntime:
    """What a worker process works on: the root it was started for
    (``DIR2MCP_ROOT``), its configuration and its embedder, made once."""

    root: Path
    state: StateDir
    config: Config
    embedder: Embedder | None

    _current: ClassVar[WorkerRuntime | None] = None

    @classmethod
    def from_settings(cls) -> WorkerRuntime:
        root = Path(settings.DIR2MCP_ROOT)
        state = StateDir(Path(settings.DIR2MCP_STATE_DIR))
        config = load_config(default_config_path(root), named=config_named())
        open_store(state)
        # The index's recorded embedder, as the server keeps it: vectors never mix.
        embedder, _ = choose_embedder(
            config, state, secrets_lookup=lambda name: resolve_secret(name, config, state, root=root).value
        )
        return cls(root, state, config, embedder)

    @classmethod
    def get(cls) -> WorkerRuntime:
        if cls._current is None:
            cls._current = cls.from_settings()
        return cls._current

    @classmethod
    def install(cls, runtime: WorkerRuntime | None) -> None:
        """Set the process's runtime (an embedded worker, or a test's root)."""
        cls._current = runtime


def same_root(mine: Path, recorded: str) -> bool:
    """The same directory: the same absolute path (the deployment gives every
    machine the corpus at one path), or, on this machine, the same real one."""
    return str(mine) == recorded or os.path.realpath(mine) == os.path.realpath(recorded)


def root_conflict(root: Path) -> str | None:
    """Why a worker started for ``root`` must not work on the corpus of this
    database, or None: the root the coordinator recorded is another, or no
    coordinator has recorded one yet (a fresh database: each task checks
    again). A database error is the caller's to handle."""
    recorded = get_setting(ROOT_KEY)
    if not recorded or same_root(root, recorded):
        return None
    return (
        f"this worker's root {root} is not the root of the corpus in this database ({recorded}, "
        f"recorded by the server that walks it): start the worker with DIR2MCP_ROOT={recorded}, "
        f"or give this corpus a database of its own"
    )


#: Deliveries of one item before it is given up as failed.
MAX_ATTEMPTS = 3


def ingest(job_id: str, rel_paths: list[str], *, worker: str, runtime: WorkerRuntime | None = None) -> int:
    """Write, count and embed ``rel_paths`` for ``job_id``, each once.

    Returns how many paths this call wrote (0 when a previous delivery had).
    A failure other than the database's marks the items ``failed`` (with
    the reason, counted as errors), so the job does not wait for them.
    """
    rt = runtime or WorkerRuntime.get()
    job = IndexJob.objects.get(job_id=job_id)
    items = JobItem.objects.filter(job=job, rel_path__in=rel_paths)
    attempts = dict(items.filter(state=JobItem.QUEUED).values_list("rel_path", "attempts"))
    queued = list(attempts)
    wrote: list[str] = []
    if queued:
        items.filter(rel_path__in=queued).update(attempts=F("attempts") + 1)
        if max(attempts.values()) + 1 > MAX_ATTEMPTS:
            fail_items(job_id, queued, f"given up after {MAX_ATTEMPTS} deliveries (a worker died on each)")
            return 0
        try:
            wrote = _write(job, queued, worker, rt)
        except (DatabaseError, InterfaceError):
            raise  # the task retries these with backoff
        except Exception as exc:
            log.exception("worker %s failed on job %s", worker, job_id)
            if isinstance(exc, errors.Dir2mcpError):
                fail_items(job_id, queued, exc.message, exc.code)
            else:
                fail_items(job_id, queued, f"{type(exc).__name__}: {exc}")
            return 0
    written = list(items.filter(state=JobItem.WRITTEN).values_list("rel_path", flat=True))
    if written:
        _embed_items(job_id, written, rt)
        items.filter(rel_path__in=written).update(state=JobItem.DONE, finished_unix=time.time())
    _seen(worker, tasks=1)
    return len(wrote)


def _write(job: IndexJob, queued: list[str], worker: str, rt: WorkerRuntime) -> list[str]:
    """Prepare ``queued`` with no transaction open, then write, count and
    mark them written in one; [] when another delivery wrote them first."""
    indexer = worker_indexer(rt, job, queued)
    try:
        if job.policy and policy_fingerprint(indexer) != job.policy:
            raise errors.Dir2mcpError(
                errors.CONFIG_INVALID,
                f"worker {worker} indexes with another configuration or other provider keys "
                f"than the process that started job {job.job_id}",
                hint="Give every worker the same .dir2mcp.yaml, DIR2MCP_* settings and API keys.",
            )
        with indexer.engine.pinned():  # a task's paths share directories: judge each once
            gone = [path for rel_path in queued for path in indexer.read_path(rel_path)]
        with transaction.atomic():
            # The lock makes a concurrent second delivery wait for this one,
            # then find the items written.
            items = JobItem.objects.filter(job=job, rel_path__in=queued)
            still = list(
                items.select_for_update().filter(state=JobItem.QUEUED).values_list("rel_path", flat=True)
            )
            if len(still) != len(queued):
                return []
            indexer.commit(gone)
            add_to_job(job.job_id, indexer.counters.as_dict())
            # With nothing to embed, written is finished.
            state = JobItem.WRITTEN if rt.embedder is not None else JobItem.DONE
            items.update(state=state, worker=worker, finished_unix=time.time())
    finally:
        indexer.close()
    return queued


def fail_items(job_id: str, rel_paths: list[str], reason: str, code: str = errors.EXTRACT_FAILED) -> None:
    """Give up on these items of a job: ``failed`` with the reason and its
    code, counted as errors once (only items not finished already change)."""
    with transaction.atomic():
        failed = (
            JobItem.objects.filter(job_id=job_id, rel_path__in=rel_paths)
            .exclude(state__in=JobItem.FINISHED)
            .update(state=JobItem.FAILED, error=reason[:2000], error_code=code, finished_unix=time.time())
        )
        add_to_job(job_id, {"errors": failed})


def _embed_items(job_id: str, rel_paths: list[str], rt: WorkerRuntime) -> None:
    """Embed the live pending chunks of these documents (and their archive
    members); each batch's vectors and its count commit together. A provider
    failure leaves them pending for the coordinator's last sweep or the
    next run, as in a single process."""
    if rt.embedder is None:
        return
    near = with_members("representation__document__rel_path", rel_paths)
    ids = list(
        Chunk.objects.filter(near, deleted=False, embedding_status=EmbeddingStatus.PENDING).values_list(
            "chunk_id", flat=True
        )
    )
    if not ids:
        return
    try:
        embed_chunks(
            rt.embedder,
            ids,
            batch_size=rt.config.embed.batch_size,
            on_stored=lambda n: add_to_job(job_id, {"embedded_ok": n}),
        )
    except errors.Dir2mcpError as exc:
        log.warning("embedding stopped on this worker, chunks stay pending: %s", exc)


def announce(name: str) -> None:
    """A worker's main process says it is up, once the store is open: it
    may start before any process of the deployment has migrated, and its
    own pool processes migrate at the same moment (the migration lock
    orders them)."""
    open_store(StateDir(Path(settings.DIR2MCP_STATE_DIR)))
    _seen(name)


def _seen(name: str, *, tasks: int = 0) -> None:
    """Record that worker ``name`` is alive (``status`` lists workers seen)."""
    now = time.time()
    updated = Worker.objects.filter(name=name).update(
        last_seen_unix=now, pid=os.getpid(), tasks_done=F("tasks_done") + tasks
    )
    if not updated:
        Worker.objects.get_or_create(
            name=name,
            defaults={
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
                "started_unix": now,
                "last_seen_unix": now,
                "tasks_done": tasks,
            },
        )
