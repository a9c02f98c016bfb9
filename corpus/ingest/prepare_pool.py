"""Preparing files in worker processes beside the one that writes the index.

Preparing a file (extract, screen for secrets, cut into units, outline,
symbols and references) is pure CPU work on bytes
(:meth:`~corpus.ingest.prepare.Preparer.prepare`), about half of a kernel
source file's cost; writing it is the other half and stays in one process,
SQLite's one writer. :class:`PreparePool` runs the preparing in
``ingest.prepare_processes`` worker processes, while the writing process
reads, decides what changed and writes, in the walk's order. A worker also
works out what writing the file needs and no database does
(:func:`corpus.ingest.writer.precompute`: the representation's hash and
compressed text, where each unit lies in it, each lexical row's identifier
split), so the writing process only writes.

Each worker is a spawned process (no state forked from a process with
threads and an open database), talking over its own pipe, with at most
:data:`DEPTH` files handed to it at a time. A thread per worker in the
writing process sends it files and resolves their futures in order, so
which file a worker held when it died is known: that file is tried again in
a new worker, and after :data:`ATTEMPTS` deaths it is recorded in error
(``EXTRACT_FAILED``, the signal named); the files queued behind it go on.
Nothing is written by a worker, so a death never leaves a half-written
index. Workers inherit the writing process's CPU niceness (the indexing
child's, ``server.indexer_nice``) and die with it (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import gc
import logging
import multiprocessing
import os
import pickle
import signal
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING

import django

from kernel import errors
from kernel.config import Config

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from corpus.ingest.prepare import Capabilities, Prepared

log = logging.getLogger(__name__)

#: Files handed to one worker at a time: the next is in its pipe while it
#: prepares one, so it never waits for the writing process to send it work.
DEPTH = 2
#: How many times a worker may die preparing one file before the file is
#: recorded in error instead of tried again.
ATTEMPTS = 2
#: How long a closing pool waits for a worker to exit before killing it.
EXIT_SECONDS = 5.0
#: With ``auto``, the pool starts only once a walk has this many files to
#: prepare. A worker costs about 2 CPU-seconds to start (Django, the
#: grammars) and saves at most half of ~18 ms a file, so below a few hundred
#: files it costs more than it gains: a pass that finds some changes, and a
#: small tree's first pass, stay in one process.
AUTO_AFTER_FILES = 500


def processes_for(setting: int | str, cores: int | None = None) -> int:
    """How many worker processes ``ingest.prepare_processes`` asks for: 0
    prepares in the writing process. ``auto`` is one worker per core, at most
    four, and none on one core: the writer only writes (what it would work
    out it is handed), about a fifth of a file's CPU, so on 2 cores one
    worker would be the pass's limit and the writer's core would idle
    (docs/benchmarks.md, issue #37)."""
    if setting != "auto":
        return int(setting)
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return 0 if cores < 2 else min(cores, 4)


@dataclass(frozen=True)
class PoolSetup:
    """What a worker rebuilds its preparer from: the same configuration,
    exclusion engine and provider capabilities as the writing process's."""

    root: Path
    state_dir: Path
    config: Config
    capabilities: Capabilities


@dataclass(eq=False)
class _Task:
    base: Prepared
    data: bytes
    future: Future[Prepared] = field(default_factory=Future)
    attempts: int = 0
    started: bool = False


class PreparePool:
    """``processes`` workers preparing files; :meth:`submit` returns a future
    that always resolves to a :class:`Prepared` (in error when its worker
    died), unless the pool was closed first (then it is cancelled)."""

    def __init__(self, setup: PoolSetup, processes: int, *, attempts: int = ATTEMPTS) -> None:
        self.attempts = attempts
        self._setup = pickle.dumps(setup)
        self._context = multiprocessing.get_context("spawn")
        self._queue: deque[_Task] = deque()
        self._cond = threading.Condition()
        self._closing = False
        #: each worker's process id and the paths it holds, for ``status`` and tests
        self._held: dict[int, tuple[int, list[str]]] = {}
        #: workers that died while preparing, since the pool started
        self.deaths = 0
        self._threads = [
            threading.Thread(target=self._feed, args=(slot,), name=f"dir2mcp-prepare-{slot}", daemon=True)
            for slot in range(processes)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, base: Prepared, data: bytes) -> Future[Prepared]:
        task = _Task(base, data)
        with self._cond:
            if self._closing:
                task.future.cancel()
                return task.future
            self._queue.append(task)
            self._cond.notify_all()
        return task.future

    def held(self) -> dict[int, list[str]]:
        """Each live worker's process id and the paths handed to it."""
        with self._cond:
            return {pid: list(paths) for pid, paths in self._held.values()}

    def close(self) -> None:
        """Cancel the files no worker holds, let the workers finish theirs,
        and stop them."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join()
        while self._queue:
            task = self._queue.popleft()
            if not task.future.cancel():  # sent once, to a worker that died: not cancellable
                task.future.set_result(_failed(task, "the pass stopped before it was prepared"))

    # -- the writing process's side: one thread per worker ----------------

    def _feed(self, slot: int) -> None:
        held: deque[_Task] = deque()
        worker: tuple[BaseProcess, Connection] | None = None
        try:
            while True:
                sent = self._take(held)
                if sent is None:
                    break
                if worker is None:
                    worker = self._spawn()
                self._note(slot, worker[0], held)
                try:
                    for task in sent:
                        worker[1].send((task.base, task.data))
                    result = worker[1].recv()
                except (EOFError, OSError):
                    self._died(worker, held)
                    worker = None
                    continue
                task = held.popleft()
                self._note(slot, worker[0], held)
                task.future.set_result(result)
        except Exception:  # a broken feeder must not leave a future unresolved: the pass would hang
            log.exception("a preparing worker's feeder failed")
            for task in held:
                if not task.future.done():
                    task.future.set_result(_failed(task, "its worker's feeder failed"))
        finally:
            with self._cond:
                self._held.pop(slot, None)
            if worker is not None:
                _stop(*worker)

    def _take(self, held: deque[_Task]) -> list[_Task] | None:
        """Fill ``held`` up to DEPTH from the queue (waiting while there is
        nothing to do); the tasks to send, or None once closed and idle."""
        sent: list[_Task] = []
        with self._cond:
            while True:
                while not held and not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing and not held:
                    return None
                while len(held) < DEPTH and self._queue and not self._closing:
                    task = self._queue.popleft()
                    if not task.started:
                        if not task.future.set_running_or_notify_cancel():
                            continue  # cancelled while queued
                        task.started = True
                    held.append(task)
                    sent.append(task)
                if held:
                    return sent

    def _note(self, slot: int, process: BaseProcess, held: deque[_Task]) -> None:
        with self._cond:
            self._held[slot] = (process.pid or 0, [task.base.rel_path for task in held])

    def _died(self, worker: tuple[BaseProcess, Connection], held: deque[_Task]) -> None:
        """The worker died holding ``held``: the first was being prepared;
        it is tried again or failed, the rest go back to the queue's front."""
        process, conn = worker
        conn.close()
        process.join(EXIT_SECONDS)
        how = _exit_reason(process.exitcode)
        self.deaths += 1
        culprit = held.popleft()
        culprit.attempts += 1
        log.warning("a preparing worker %s while preparing %s", how, culprit.base.rel_path)
        with self._cond:
            back = list(held)
            if culprit.attempts < self.attempts:
                back.insert(0, culprit)
            self._queue.extendleft(reversed(back))
            self._cond.notify_all()
        held.clear()
        if culprit.attempts >= self.attempts:
            tries = "once" if culprit.attempts == 1 else f"{culprit.attempts} times"
            culprit.future.set_result(_failed(culprit, f"the process preparing it {how} ({tries})"))

    def _spawn(self) -> tuple[BaseProcess, Connection]:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=serve, args=(theirs, self._setup, os.getpid()), name="dir2mcp-prepare", daemon=True
        )
        process.start()
        theirs.close()  # the worker's end lives in the worker alone: its death reads as EOF here
        return process, ours


def _failed(task: _Task, why: str) -> Prepared:
    return task.base.fail("error", errors.EXTRACT_FAILED, f"{why}; not indexed")


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited (code {code})"


def _stop(process: BaseProcess, conn: Connection) -> None:
    try:
        conn.send(None)
    except OSError:
        pass
    conn.close()
    process.join(EXIT_SECONDS)
    if process.is_alive():
        process.kill()
        process.join()


# -- the worker's side --------------------------------------------------------


def serve(conn: Connection, setup: bytes, parent: int) -> None:
    """A worker: prepare each ``(base, data)`` received, send back the
    result, until ``None`` or the writing process is gone."""
    _die_with(parent)
    django.setup()
    # After Django's setup: the preparer's modules import the models.
    from corpus.ingest.prepare import Preparer  # noqa: PLC0415
    from corpus.ingest.writer import precompute  # noqa: PLC0415
    from corpus.security import ExclusionEngine  # noqa: PLC0415

    found: PoolSetup = pickle.loads(setup)
    engine = ExclusionEngine.from_config(found.root, found.config, state_dir=found.state_dir)
    preparer = Preparer(found.config, engine, found.capabilities)
    # What setting up left (Django, the models, the configuration) lives as
    # long as the worker: kept out of the collector's full passes, which
    # otherwise walked it again and again (a tenth of a kernel file's CPU).
    gc.freeze()
    tasks = _Inbox(conn)
    while (task := tasks.next()) is not None:
        base, data = task
        try:
            # What the writer would work out without the database is worked out here.
            prepared = precompute(preparer.prepare(base, data))
        except Exception as exc:  # one bad document must not stop the run
            log.exception("failed to prepare %s", base.rel_path)
            prepared = base.fail("error", errors.EXTRACT_FAILED, f"{type(exc).__name__}: {exc}")
        try:
            conn.send(prepared)
        except OSError:
            return


class _Inbox:
    """Receives tasks on a thread of their own, so that a large file sent
    while this worker sends a large result back cannot block both sides."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._items: deque[tuple[Prepared, bytes] | None] = deque()
        self._ready = threading.Condition()
        threading.Thread(target=self._read, name="dir2mcp-prepare-inbox", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                item = self._conn.recv()
            except (EOFError, OSError):
                item = None
            with self._ready:
                self._items.append(item)
                self._ready.notify()
            if item is None:
                return

    def next(self) -> tuple[Prepared, bytes] | None:
        with self._ready:
            while not self._items:
                self._ready.wait()
            return self._items.popleft()


def _die_with(parent: int) -> None:
    """Die when the writing process does (Linux), and at once if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the pipe's EOF stops this worker
        pass
    if os.getppid() != parent:
        os._exit(1)
