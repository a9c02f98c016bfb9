"""The indexer in a child process, supervised by the server (issue #17).

A server that also extracts and embeds in its own process answers slowly
while it indexes: the embedder's arithmetic and the pipeline's Python hold
the GIL, and request handling waits for it (0.3–1.6 s per search on a
50,000-file tree against 20–210 ms for a second process serving the same
index). So ``up`` and ``mcp_stdio`` run the indexer as a child process at a
lower CPU priority (``indexer_child``), and the server does requests and
light coordination only.

What crosses between them:

- **Index data** goes through the store: the child commits documents and
  chunks (the lexical index sees them at once) and vectors under a
  per-kind version (``corpus.index.dense.embedding``); the server's dense indices take
  the new vectors in small slices (:class:`DenseRefresher`), and at the end
  of a views pass load the code index the child built and saved, rather
  than build it a second time here.
- **Reports** (progress, warnings, events) go over the child's stdout as
  one JSON object per line, each a call on the server's own reporter
  (:class:`ForwardingReporter` writes them, :func:`replay` plays them back),
  so the user sees one stream whatever the mode (human, ``--json``, stdio).
- **Requests** (the admin's "re-index these documents") go over its stdin;
  when stdin closes (the server died, even by SIGKILL) the child stops.

The child holds the index lock, as the in-process indexer did. A child that
dies is restarted with exponential backoff; restarts are reported as
warnings and ``indexer_restarted`` events, and recorded in ``settings``
(key ``indexer_process``) for ``status`` and ``stats``. Stopping sends
SIGTERM (the child stops at a safe point: documents commit one at a time),
then SIGKILL after ``stop_wait`` seconds. A server that dies outright takes
its child with it (``PR_SET_PDEATHSIG`` on Linux; elsewhere the child stops
when its stdin closes), as the indexing thread died with its process.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from django.db import connections

from corpus.events import Reporter
from corpus.index.dense.embedding import dense_store, embed_first, views_to_come
from corpus.index.dense.vectors import KINDS
from corpus.models import Chunk, EmbeddingStatus
from corpus.status import INDEXER_KEY
from corpus.store import set_setting
from kernel.jsontypes import JsonObject, JsonValue
from kernel.state import SpaceReserve, StateDir
from mcp_gateway.context import Context

log = logging.getLogger(__name__)

#: The settings key holding the supervisor's state (JSON), for status/stats.
SETTING_KEY = INDEXER_KEY
#: Backoff between restarts of a child that died: doubles up to the maximum,
#: back to the first once a child has lived ``HEALTHY_SECONDS``.
FIRST_BACKOFF = 1.0
MAX_BACKOFF = 60.0
HEALTHY_SECONDS = 60.0
#: How often the server's dense indices take new vectors from the store.
REFRESH_SECONDS = 0.5
#: How many files asked about (search hits, open_file) the child keeps to embed first.
EMBED_FIRST_MAX = 256
#: Vectors added per hold of an index's lock: a search waits at most this many inserts.
REFRESH_SLICE = 4
#: How long, at the end of a views pass, the server's refresher waits for the
#: index file its child saves after building its code index again, to load it
#: rather than build the same index itself (DenseStore.follow_saves): the
#: child's build and save took 10-40 s of wall on a loaded 2-core machine
#: (docs/benchmarks.md, "Time to dense", sessions 27 and 28); past this the
#: server builds it (a child that died, or one on another machine)
SAVED_WAIT_SECONDS = 120.0

# The reporter calls a child may make on the server's reporter.
_CALLS = ("event", "say", "warn", "file_error", "progress", "documents_changed")


# -- the child's side ---------------------------------------------------------


class ForwardingReporter(Reporter):
    """A reporter that writes each call as one JSON line for the parent to
    replay (the child's stdout is a pipe the server reads)."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream, json_mode=False, quiet=False)
        self._send_lock = threading.Lock()
        self._last_sent = 0.0

    def _send(self, call: str, *args: object, **kwargs: object) -> None:
        line = json.dumps({"call": call, "args": args, "kwargs": kwargs}, default=str)
        with self._send_lock:
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the server is gone; stdin's EOF stops this process

    def event(self, event: str, data: object = None, *, level: str = "info") -> None:
        self._send("event", event, data, level=level)

    def say(self, text: str) -> None:
        self._send("say", text)

    def warn(self, text: str, **data: object) -> None:
        self._send("warn", text, **data)

    def file_error(self, rel_path: str, code: str, message: str) -> None:
        self._send("file_error", rel_path, code, message)

    def documents_changed(self, rel_paths: list[str], *, listing: bool = False) -> None:
        self._send("documents_changed", list(rel_paths), listing=listing)

    def progress(self, counters: dict[str, int], *, final: bool = False, running: bool = True) -> None:
        # The parent's reporter throttles what it shows; this only spares the pipe.
        now = time.monotonic()
        if not final and now - self._last_sent < 0.2:
            return
        self._last_sent = now
        self._send("progress", dict(counters), final=final, running=running)


# -- the server's side --------------------------------------------------------


def replay(
    line: str, reporter: Reporter, *, drop: frozenset[str] = frozenset()
) -> tuple[str, tuple[JsonValue, ...], JsonObject] | None:
    """Play one line of the child's output on ``reporter``; returns the call
    (name, args, kwargs), or None for a line that is not one (printed as a
    warning: a stray print in the child must not vanish) or for an event
    named in ``drop``."""
    try:
        record = json.loads(line)
        call, args, kwargs = record["call"], tuple(record.get("args") or ()), dict(record.get("kwargs") or {})
    except (ValueError, KeyError, TypeError, AttributeError):
        text = line.strip()
        if text:
            reporter.warn(f"indexer: {text}")
        return None
    if call not in _CALLS or (call == "event" and args and args[0] in drop):
        return None
    try:
        getattr(reporter, call)(*args, **kwargs)
    except TypeError:  # a malformed call from a child of another version
        log.warning("indexer sent an unusable %s call", call)
        return None
    return call, args, kwargs


@dataclass
class ChildLaunch:
    """How to start the child: the paths ``up`` resolved for itself."""

    root: Path
    state: StateDir
    config_path: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    #: CPU niceness of the child relative to the server (``server.indexer_nice``)
    nice: int = field(kw_only=True)

    def argv(self) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "dir2mcp_site.cli",
            "indexer_child",
            "--dir",
            str(self.root),
            "--state-dir",
            str(self.state.path),
            "--non-interactive",
        ]
        if self.config_path is not None and self.config_path.is_file():
            args += ["--config", str(self.config_path)]
        return args

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        return env


class _Window:
    """Things done per second over the last ``window`` seconds, from a
    running count reported now and then (the last two reports at least,
    when they come further apart), from the first report that counted
    something: the reports before it (a lexical pass, the first batch's
    wait for the model) counted in made the first estimate of a dense pass
    after the lexical one 0.02 chunks/s on the kernel's drivers/net, an ETA
    of 160 days for about an hour and a half (issue #37). A count that goes
    down is a new job's: it counts from its own start."""

    def __init__(self, window: float, clock: Callable[[], float]) -> None:
        self.window = window
        self.clock = clock
        self._points: deque[tuple[float, int]] = deque()
        self._counted = False  # whether this job has counted anything yet

    def add(self, done: int) -> None:
        now = self.clock()
        if self._points and done < self._points[-1][1]:
            self._points.clear()
            self._counted = False
        if self._points and not self._counted and done > self._points[-1][1]:
            self._points.clear()  # the first thing counted: count from here
            self._counted = True
        self._points.append((now, done))
        while len(self._points) > 2 and now - self._points[0][0] > self.window:
            self._points.popleft()

    def per_second(self) -> float:
        if len(self._points) < 2 or not self._counted:
            return 0.0
        (t0, d0), (t1, d1) = self._points[0], self._points[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else 0.0


class _Rate:
    """The indexing child's embedding rates, from its progress reports:
    chunks given their (own) vectors per second, and signature views per
    second (views later: corpus/index/dense/embedding.py), each over the
    last ``window`` seconds (:class:`_Window`); and where the job stands."""

    def __init__(self, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._units = _Window(window, clock)
        self._views = _Window(window, clock)
        self.total = 0
        self.done = 0
        #: signature views the job has still to embed, as it last counted them
        self.views_waiting = 0

    def add(self, counters: JsonObject) -> None:
        self.total = int(counters.get("chunks_total") or 0)
        self.done = int(counters.get("embedded_ok") or 0)
        self.views_waiting = int(counters.get("views_waiting") or 0)
        self._units.add(self.done)
        self._views.add(int(counters.get("views_embedded") or 0))

    def complete(self) -> bool:
        """Whether the current job has embedded every chunk it counts, and
        every signature view."""
        return bool(self.total) and self.done >= self.total and not self.views_waiting

    def per_second(self) -> float:
        """Chunks given a vector per second."""
        return self._units.per_second()

    def views_per_second(self) -> float:
        """Signature views embedded per second (0 before any was)."""
        return self._views.per_second()


class IndexerSupervisor:
    """Starts the indexing child, replays its reports, restarts it when it
    dies, and stops it with the server. Thread-like: ``is_alive`` and
    ``join`` are what the server's shutdown waits on."""

    def __init__(
        self,
        launch: ChildLaunch,
        reporter: Reporter,
        stop: threading.Event,
        *,
        ready: threading.Event | None = None,
        stop_wait: float = 30.0,
        first_backoff: float = FIRST_BACKOFF,
        on_progress: Callable[[], None] | None = None,
    ) -> None:
        self.launch = launch
        #: called on each progress report of the child (it reports after storing vectors)
        self.on_progress = on_progress
        self.reporter = reporter
        self.stop = stop
        self.ready = ready
        self.stop_wait = stop_wait
        self.first_backoff = first_backoff
        self.restarts = 0
        self.last_exit: JsonObject | None = None
        self.rate = _Rate()
        #: changes a full disk kept from being written (corpus.ingest.watch.Unwritten)
        self.unwritten = UnwrittenCount()
        self._proc: subprocess.Popen[str] | None = None
        self._stdin_lock = threading.Lock()
        # Paths already asked to be embedded first (recent ones only).
        self._asked: deque[str] = deque(maxlen=EMBED_FIRST_MAX)
        self._outbox: queue.Queue[JsonObject] = queue.Queue(maxsize=64)
        self._thread = threading.Thread(
            target=self._supervise, name="dir2mcp-indexer-supervisor", daemon=True
        )

    # -- thread-like --

    def start(self) -> IndexerSupervisor:
        self._thread.start()
        threading.Thread(target=self._send_outbox, name="dir2mcp-indexer-requests", daemon=True).start()
        return self

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    # -- requests --

    def request_reindex(self, rel_paths: list[str], *, full: bool) -> bool:
        """Ask the child to re-index ``rel_paths``; False when no child runs."""
        return self._send({"op": "reindex", "paths": list(rel_paths), "full": bool(full)})

    def _send(self, request: JsonObject) -> bool:
        line = json.dumps(request) + "\n"
        with self._stdin_lock:
            proc = self._proc
            if proc is None or proc.poll() is not None or proc.stdin is None:
                return False
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                return False
        return True

    def embed_first(self, rel_paths: list[str], *, again: bool = False) -> bool:
        """Ask the child to embed these files' pending chunks before the rest
        (a client asked about them); nothing is sent once embedding is done.
        A path asked lately is sent again only ``again`` (a file opened: it
        moves up, corpus.index.dense.embedding.EmbedFirst)."""
        if self.rate.complete():
            return False
        fresh = [p for p in dict.fromkeys(rel_paths) if again or p not in self._asked]
        if not fresh:
            return False
        self._asked.extend(p for p in fresh if p not in self._asked)
        try:  # a request never waits on the pipe: the sender thread writes it
            self._outbox.put_nowait({"op": "embed_first", "paths": fresh, "again": again})
        except queue.Full:
            return False
        return True

    def _send_outbox(self) -> None:
        while not self.stop.is_set():
            try:
                request = self._outbox.get(timeout=0.5)
            except queue.Empty:
                continue
            self._send(request)

    def describe(self) -> JsonObject:
        return {
            "mode": "process",
            "pid": self.pid,
            "running": self.pid is not None,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "embed_rate_per_second": round(self.rate.per_second(), 2),
            "views_rate_per_second": round(self.rate.views_per_second(), 2),
            "unwritten": self.unwritten.as_dict(),
        }

    # -- supervision --

    def _supervise(self) -> None:
        backoff = self.first_backoff
        reserve = SpaceReserve(self.launch.state)
        reserve.hold()
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                code = self._run_child()
                if self.stop.is_set():
                    break
                lived = time.monotonic() - started
                if lived >= HEALTHY_SECONDS:
                    backoff = self.first_backoff
                self.restarts += 1
                self.last_exit = _exit_record(code)
                self._record()
                self.reporter.warn(
                    f"the indexer process exited ({self.last_exit['reason']}); "
                    f"restarting it in {backoff:g} s (restart {self.restarts})",
                    code="INDEXER_RESTARTED",
                )
                self.reporter.event(
                    "indexer_restarted",
                    {**self.last_exit, "restarts": self.restarts, "backoff_seconds": backoff},
                    level="warn",
                )
                if self.stop.wait(backoff):
                    break
                backoff = min(backoff * 2, MAX_BACKOFF)
        except Exception:  # the server outlives its indexer
            log.exception("indexer supervision failed")
            self.reporter.warn("indexer supervision failed; still serving the index as it is")
        finally:
            self._record(stopped=True)
            reserve.release()
            _close_connections()

    def _run_child(self) -> int:
        proc = subprocess.Popen(
            self.launch.argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,  # logs go where the server's go
            env=self.launch.env(),
            text=True,
            encoding="utf-8",
            errors="replace",
            bufsize=1,
            preexec_fn=_child_setup(os.getpid(), self.launch.nice),  # noqa: PLW1509  (prctl and nice: no locks, no imports)
        )
        with self._stdin_lock:
            self._proc = proc
        self._record()
        reader = threading.Thread(target=self._read, args=(proc,), name="dir2mcp-indexer-output", daemon=True)
        reader.start()
        while proc.poll() is None:
            if self.stop.wait(0.2):
                self._terminate(proc)
                break
        code = proc.wait()
        reader.join(5)
        with self._stdin_lock:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
        return code

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            # Each job announces index_loaded; the server announced it once when it started.
            done = replay(line, self.reporter, drop=frozenset({"index_loaded"}))
            if done is None:
                continue
            call, args, _ = done
            if call == "event" and args and args[0] == "watch_ready" and self.ready is not None:
                self.ready.set()
            event = args[0] if call == "event" and args else None
            if isinstance(event, str) and self.unwritten.note(event, args[1] if len(args) > 1 else None):
                self._record_unwritten()
            if call == "progress" and args and isinstance(args[0], dict):
                self.rate.add(args[0])
                if self.on_progress is not None:
                    self.on_progress()

    def _terminate(self, proc: subprocess.Popen[str]) -> None:
        """SIGTERM (stop at a safe point), then SIGKILL after ``stop_wait``."""
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(self.stop_wait)
        except subprocess.TimeoutExpired:
            self.reporter.warn(
                "the indexer did not stop in time; killing it (documents are committed one at a "
                "time, so the index stays consistent; the next run picks up the rest)"
            )
            proc.kill()

    def _record_unwritten(self) -> None:
        """Record what waits to be written, for ``status``: on a full disk,
        in the space the reserve gave back; the reserve is taken again once
        nothing waits."""
        reserve = SpaceReserve(self.launch.state)
        waiting = self.unwritten.as_dict() is not None
        if waiting:
            reserve.release()
        self._record()
        if not waiting:
            reserve.hold()
        _close_connections()

    def _record(self, *, stopped: bool = False) -> None:
        state = self.describe()
        if stopped:
            state.update(running=False, pid=None)
        try:
            set_setting(SETTING_KEY, json.dumps(state))
        except Exception:  # a store that cannot be written is reported elsewhere
            log.warning("cannot record the indexer's state", exc_info=True)


class IndexerThread:
    """The indexer in a daemon thread of the serving process
    (``server.indexer: thread``), with the supervisor's face: thread-like,
    the embedding rate for ``stats``' ETA (fed by the reporter the pipeline
    reports progress to, mcp_gateway.background), and embed-first requests, which go
    straight to this process's queue since the pipeline runs here."""

    def __init__(self) -> None:
        self.rate = _Rate()
        self.unwritten = UnwrittenCount()
        self._thread: threading.Thread | None = None

    def start(self, target: Callable[..., object], *args: object) -> IndexerThread:
        self._thread = threading.Thread(target=target, args=args, name="dir2mcp-indexer", daemon=True)
        self._thread.start()
        return self

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def request_reindex(self, rel_paths: list[str], *, full: bool) -> bool:
        """Never taken here: the admin's run goes beside the live sync in
        this process (mcp_gateway.reindex)."""
        return False

    def embed_first(self, rel_paths: list[str], *, again: bool = False) -> bool:
        if self.rate.complete() or not rel_paths:
            return False
        embed_first.add(rel_paths, again=again)
        return True

    def describe(self) -> JsonObject:
        return {
            "mode": "thread",
            "pid": None,
            "running": self.is_alive(),
            "restarts": 0,
            "last_exit": None,
            "embed_rate_per_second": round(self.rate.per_second(), 2),
            "views_rate_per_second": round(self.rate.views_per_second(), 2),
            "unwritten": self.unwritten.as_dict(),
        }


class UnwrittenCount:
    """What the indexer last said about changes a full disk kept from being
    written: its ``store_write_failed`` and ``store_write_landed`` events
    (corpus.ingest.watch.Unwritten), for ``stats`` and ``status``."""

    def __init__(self) -> None:
        self.paths = 0
        self.walk = False
        self.code = ""
        self.message = ""

    def note(self, event: str, data: object) -> bool:
        """Take one event in; whether it was one of these."""
        if event == "store_write_failed" and isinstance(data, dict):
            self.paths, self.walk = int(data.get("paths") or 0), bool(data.get("walk"))
            self.code, self.message = str(data.get("code") or ""), str(data.get("message") or "")
            return True
        if event == "store_write_landed":
            self.paths, self.walk, self.code, self.message = 0, False, "", ""
            return True
        return False

    def as_dict(self) -> JsonObject | None:
        if not (self.paths or self.walk):
            return None
        return {"paths": self.paths, "walk": self.walk, "code": self.code, "message": self.message}


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux: stdin's EOF still stops the child
        return None


_PRCTL = _libc_prctl()
_PR_SET_PDEATHSIG = 1


def _child_setup(parent: int, nice: int) -> Callable[[], None]:
    """What runs in the child between fork and exec: die with the server
    (a server killed outright takes its indexer with it, as a thread would
    go), and yield the CPU to it by ``nice``. Only calls resolved before the fork."""

    def setup() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the server died before that took effect
            os._exit(1)
        try:
            if nice:
                os.nice(nice)
        except OSError:
            pass

    return setup


def _exit_record(code: int) -> JsonObject:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return {"exit_code": None, "signal": name, "reason": f"killed by {name}", "at_unix": time.time()}
    return {"exit_code": code, "signal": None, "reason": f"exit code {code}", "at_unix": time.time()}


def _close_connections() -> None:
    connections.close_all()


# -- the server's dense indices follow the store --------------------------------


class DenseRefresher:
    """Adds the vectors other processes store to this process's dense
    indices, in a thread, a slice at a time, so no search pays for it.

    Each pass compares each kind's embeddings version with the one last
    taken (one settings read when nothing changed) and adds only the rows
    stored since (``DenseStore.sync``). Passes run every ``every`` seconds
    (what other machines' workers store is seen that way) and at once when
    ``wake`` is called: the supervisor calls it on each progress report of
    its child, which reports after storing.

    ``after``: the first pass waits for it (``up`` sets it once it has
    answered a first request): the first pass loads each ``.hnsw`` file and
    lists the embedded chunks, which on a large index would compete with
    the server's first answer. A search before then syncs for itself.

    ``follow_saves``: the indexing child shares this state directory (``up``),
    so at the end of a views pass the code index is not built again here
    but loaded from the file the child saves after its own build, waiting
    up to that many seconds for it (``DenseStore.follow_saves``; loading and
    swapping happen in this thread, searches read the index held until
    then). None (a server whose vectors come from another machine): built
    here, from the database."""

    def __init__(
        self,
        state: StateDir,
        stop: threading.Event,
        *,
        every: float = REFRESH_SECONDS,
        after: threading.Event | None = None,
        follow_saves: float | None = None,
    ) -> None:
        self.state = state
        self.stop = stop
        self.every = every
        self.after = after
        self.follow_saves = follow_saves
        self.passes = 0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dir2mcp-dense-refresh", daemon=True)

    def start(self) -> DenseRefresher:
        # from now, not from the first pass: a search before it (which syncs
        # for itself) waits for the child's file too rather than build one
        dense_store(self.state).follow_saves = self.follow_saves
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def wake(self) -> None:
        """Take new vectors now rather than at the next tick (the indexing
        child reported progress: it may have stored some)."""
        self._wake.set()

    def _loop(self) -> None:
        store = dense_store(self.state)
        while self.after is not None and not self.after.wait(self.every):
            if self.stop.is_set():
                store.follow_saves = None
                return
        store.refresher = self
        store.follow_saves = self.follow_saves
        try:
            while not self.stop.is_set():
                self._wake.wait(self.every)
                self._wake.clear()
                if self.stop.is_set():
                    break
                for kind in KINDS:
                    try:
                        store.sync(kind, slice_size=REFRESH_SLICE)
                        if store.deferred(kind):  # a build or load waiting for the child's file
                            store.settle(kind)
                    except Exception:  # a busy or broken store: try again next pass
                        log.debug("dense refresh of %s failed", kind, exc_info=True)
                self.passes += 1
        finally:
            store.refresher = None
            store.follow_saves = None
            _close_connections()


# -- what status and stats show ---------------------------------------------

#: what a signature view costs to embed against a unit's own text (its short
#: text: 13.0 CPU-s of views against 43.7 of units over one part of the
#: standard library, docs/benchmarks.md, session 24), for the ETA before the
#: views pass has a rate of its own
VIEW_COST = 0.3


def dense_eta(units: int, views: int, unit_rate: float, view_rate: float) -> float | None:
    """Seconds until every chunk has its vector and every code unit its
    signature view, at the recent rates: ``units`` chunks and ``views``
    views still to embed. While chunks remain (views come after every
    unit), a view counts as VIEW_COST of a unit: the only views embedded
    then are those of files an agent asked about (embed-first), a few now
    and then, whose rate says nothing of the views pass (on the whole Linux
    kernel that trickle made the estimate 178 days for a pass of a few
    hours). None when a rate needed is not known yet."""
    if units <= 0 and views <= 0:
        return 0.0
    if (units > 0 or view_rate <= 0) and unit_rate > 0:
        view_rate = unit_rate / VIEW_COST
    if (units > 0 and unit_rate <= 0) or (views > 0 and view_rate <= 0):
        return None
    seconds = (units / unit_rate if units > 0 else 0.0) + (views / view_rate if views > 0 else 0.0)
    return round(seconds, 1)


def summary(ctx: Context) -> JsonObject:
    """The indexer as ``stats`` shows it: where it runs, whether it is
    alive, how often it was restarted, and dense coverage with the
    estimated time to full coverage at the recent embedding rate."""
    supervisor = getattr(ctx, "indexer", None)
    live = Chunk.objects.filter(deleted=False)
    total = live.count()
    embedded = live.filter(embedding_status=EmbeddingStatus.OK).count() if total else 0
    views = views_to_come() if total else 0
    found = (
        supervisor.describe() if supervisor is not None else {"mode": getattr(ctx, "indexer_mode", "none")}
    )
    rate = supervisor.rate if supervisor is not None else None
    eta = dense_eta(
        total - embedded,
        views,
        rate.per_second() if rate is not None else 0.0,
        rate.views_per_second() if rate is not None else 0.0,
    )
    return {
        "mode": found.get("mode", "none"),
        "running": bool(found.get("running")),
        "pid": found.get("pid"),
        "restarts": int(found.get("restarts", 0)),
        "last_exit": found.get("last_exit"),
        "unwritten": found.get("unwritten"),
        "dense": {
            "embedded": embedded,
            "total": total,
            "rate_per_second": found.get("embed_rate_per_second"),
            "views_waiting": views,
            "views_rate_per_second": found.get("views_rate_per_second"),
            "eta_seconds": eta,
            "waiting_for_file": dense_store(ctx.state).waiting(),
        },
    }
