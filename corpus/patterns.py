"""Bounded work for every pattern a caller sends (issue #23).

* **Regular expressions** (``dir2mcp.find`` with ``regex: true``) are
  compiled and run in one worker process (:mod:`corpus.regex_worker`), never
  in the server: compiling a pattern such as ``(?:(?:a{9}){9}){9}…`` holds
  the GIL and checks no timeout, and matching can take memory without end.
  The worker's address space is capped (:data:`WORKER_MEMORY_BYTES`), and
  the server kills it the moment a call's deadline passes, whatever it is
  doing; the next call starts a fresh one. There is one worker, so all
  regex calls share one budget: a call waits for it within its own
  deadline, and a dozen hostile calls cost one core for one budget each in
  turn, not the whole machine. Turns are fair between hosts, and between
  the clients of a host (:class:`Turns`): the next goes to the waiting
  client whose host had one least recently, and a turn another client waits
  behind ends a quarter of that client's time after it began waiting, so
  one client's calls never take every turn, nor one host's many sessions.
* **Literal text** (``find`` without ``regex``) stays in the server: an
  escaped literal compiles in linear time, and the ``regex`` module matches
  it without the GIL and with a timeout.
* **Globs** are matched in linear time (:mod:`corpus.globs`).
* **Queries and questions** are capped at :data:`MAX_QUERY_CHARS` and
  :data:`MAX_QUESTION_CHARS`.
"""

from __future__ import annotations

import atexit
import contextvars
import marshal
import os
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel import errors

#: ``search``'s query (also sent in a GET URL, which the server reads up to 16 KiB)
MAX_QUERY_CHARS = 1000
#: ``ask``'s question, and the longest text any search runs on
MAX_QUESTION_CHARS = 4000
MAX_REGEX_CHARS = 1000
#: the worker's address space: the interpreter (~20 MB), one text as it
#: arrives and decoded (a few times its size), and the compiled pattern
WORKER_MEMORY_BYTES = 512 * 2**20
#: how long past its deadline a reply may come before the worker is killed
GRACE_SECONDS = 0.02

_WORKER = Path(__file__).with_name("regex_worker.py")
_HEADER = struct.Struct("<Q")
#: a request to the worker, as corpus/regex_worker.py's docstring lists them
_Request = tuple[str | int | float, ...]
#: its reply
# Any: marshal.loads gives Any, and the fields after the first differ by
# reply (the worker's docstring)
_Reply = tuple[Any, ...]


def check_query(query: str) -> None:
    """``INVALID_RANGE`` for a search text past :data:`MAX_QUESTION_CHARS`
    (the tools' schemas hold ``query`` to :data:`MAX_QUERY_CHARS`)."""
    if len(query) > MAX_QUESTION_CHARS:
        raise errors.Dir2mcpError(
            errors.INVALID_RANGE, f"the query or question is longer than {MAX_QUESTION_CHARS} characters"
        )


class Overrun(Exception):
    """The deadline passed: the worker was killed (or never became free)."""


class Starting(Overrun):
    """The deadline passed while the worker was still starting (a fresh
    interpreter importing ``regex``; slow on a busy machine): nothing was
    asked of it yet, so nothing is known of the pattern, and the worker is
    left to finish starting for the next call."""


class _Died(Exception):
    """The worker ended without answering (killed from outside, or crashed)."""


class _Worker:
    """The child process and its pipes; used by the holder of a turn (:class:`Turns`) only."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        #: whether the running worker has said it is ready (its first frame)
        self.ready = False
        #: how long the last request waited for a worker just started to say it is ready
        self.ready_wait = 0.0

    def start(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                return
            self.kill()  # it ended (killed from outside): close its pipes
        self.ready = False
        self.proc = subprocess.Popen(
            [sys.executable, "-I", str(_WORKER), str(WORKER_MEMORY_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,  # Ctrl-C reaches the server, which ends us
        )

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is None:  # never: start() opens both as pipes
                continue
            try:
                pipe.close()
            except OSError:
                pass

    def request(self, message: _Request, deadline: float) -> _Reply:
        """The worker's reply, or ``Overrun`` (and a killed worker) at the
        deadline, or when the turn must be given up (:meth:`Turns.must_yield`);
        ``Starting`` (the worker kept) when that comes before a worker just
        started has said it is ready, so its start is never taken for the
        request's own time."""
        self.start()
        assert self.proc is not None and self.proc.stdin is not None  # start() opened it
        self.ready_wait = 0.0
        if not self.ready:
            began = time.monotonic()
            self._wait_ready(deadline)
            # The start is not the request's: its time is given back.
            self.ready_wait = time.monotonic() - began
            deadline += self.ready_wait
        payload = marshal.dumps(message)
        try:
            self.proc.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.proc.stdin.flush()
            header = self._read(_HEADER.size, deadline)
            reply: _Reply = marshal.loads(self._read(_HEADER.unpack(header)[0], deadline))
        except Overrun:
            self.kill()
            self.start()  # the next call finds it ready
            raise
        except (OSError, EOFError, ValueError, _Died):
            self.kill()
            raise _Died() from None
        if reply[0] == "memory":
            self.kill()
        return reply

    def _wait_ready(self, deadline: float) -> None:
        """Read the worker's first frame, ``("ready",)``: ``Starting`` (the
        worker kept, nothing read) when the deadline or another client's turn
        comes first."""
        try:
            header = self._read(_HEADER.size, deadline)
        except Overrun:
            raise Starting() from None
        except (OSError, _Died):
            self.kill()
            raise _Died() from None
        try:  # written with its header in one write: here at once, but a turn may end between
            first = marshal.loads(self._read(_HEADER.unpack(header)[0], deadline))
        except Overrun:
            self.kill()
            raise Starting() from None
        except (OSError, EOFError, ValueError, _Died):
            self.kill()
            raise _Died() from None
        if first != ("ready",):
            self.kill()
            raise _Died()
        self.ready = True

    def _read(self, size: int, deadline: float) -> bytes:
        assert self.proc is not None and self.proc.stdout is not None  # request() started it
        fd = self.proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        chunks, left = [], size
        while left:
            now = time.monotonic()
            if _turns.must_yield(now):
                raise Overrun()
            wait = min(deadline + GRACE_SECONDS - now, _YIELD_POLL_SECONDS)
            if wait <= 0:
                raise Overrun()
            if not poller.poll(wait * 1000):
                continue
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise _Died()
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


#: who a call is made for: its host and, within it, its client (an MCP
#: session, or the host again); mcp_gateway/workers.py sets it on each call thread
Who = tuple[str, str]
CLIENT: contextvars.ContextVar[Who] = contextvars.ContextVar("dir2mcp_client", default=("", ""))
#: how often a turn's holder looks whether another client waits for it
_YIELD_POLL_SECONDS = 0.05
#: clients whose last turn is remembered when none of them waits
_REMEMBERED_CLIENTS = 1024


@dataclass(eq=False)
class _Waiter:
    who: Who
    #: when the holder must have given way to it: a quarter of its time after it arrived
    claim_at: float


@dataclass
class Turns:
    """Turns at the one regex worker, fair between clients.

    Until session 21 a lock: one client keeping a call waiting took the
    next turn as often as not, and each turn could last a whole find budget,
    so another client's regex ``find`` answered ``timed_out`` again and again.
    Now the next turn goes to the waiting client that had one least recently
    (in arrival order among equals), and while another client waits the
    holder's turn ends a quarter of that client's time after it began
    waiting, though never before the holder has had a quarter of its own
    (:meth:`must_yield`): its worker is killed and its call answers
    ``timed_out`` with a cursor to go on from. So a waiting client whose
    turn is next gets at least three quarters of its time at the worker, and
    every turn lasts at least a quarter of its holder's time (calls kept
    waiting until their time is nearly out cannot cut every turn short).

    Until session 22 each MCP session was a client of its own, so one host
    that opened many sessions had a turn for each of them to every one of
    another host's. Now the next turn goes to the waiting client whose host
    had a turn least recently, and among a host's clients to the one that
    had one least recently: hosts take turns, and so do a host's sessions
    within its turns.
    """

    cond: threading.Condition = field(default_factory=threading.Condition)
    holder: Who | None = None
    waiting: list[_Waiter] = field(default_factory=list)
    #: the serial number of each host's last turn, and of each client's
    last: dict[str, int] = field(default_factory=dict)
    last_host: dict[str, int] = field(default_factory=dict)
    served: int = 0
    #: when the holder must give its turn up (another client waits), or None
    yield_at: float | None = None
    #: until when the holder keeps its turn whoever waits: a quarter of its own time
    guard: float = 0.0

    def take(self, who: Who, deadline: float) -> bool:
        """Wait for a turn for ``who`` (host, client) until ``deadline``; False when none came."""
        now = time.monotonic()
        me = _Waiter(who, now + max(deadline - now, 0) / 4)
        with self.cond:
            self.waiting.append(me)
            self._ask_holder_to_yield()
            try:
                while not (self.holder is None and self._next() is me):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self.cond.wait(left)
            finally:
                self.waiting.remove(me)
                self.cond.notify_all()  # whoever is next now, if it was this one that gave up
            now = time.monotonic()
            self.holder, self.yield_at = who, None
            self.guard = now + max(deadline - now, 0) / 4
            self.served += 1
            self.last_host[who[0]] = self.last[who[1]] = self.served
            self._ask_holder_to_yield()
            return True

    def give_back(self) -> None:
        with self.cond:
            self.holder, self.yield_at = None, None
            if len(self.last) > _REMEMBERED_CLIENTS or len(self.last_host) > _REMEMBERED_CLIENTS:
                hosts, clients = {w.who[0] for w in self.waiting}, {w.who[1] for w in self.waiting}
                self.last = {c: n for c, n in self.last.items() if c in clients}
                self.last_host = {h: n for h, n in self.last_host.items() if h in hosts}
            self.cond.notify_all()

    def must_yield(self, now: float) -> bool:
        """Whether the holder's turn has ended because another client waits."""
        at = self.yield_at  # one read: set and cleared under the lock by others
        return at is not None and now >= at

    def _next(self) -> _Waiter | None:
        if not self.waiting:
            return None
        return min(  # min is stable: arrival order among equals
            self.waiting, key=lambda w: (self.last_host.get(w.who[0], 0), self.last.get(w.who[1], 0))
        )

    def _ask_holder_to_yield(self) -> None:
        """Under the lock: end the holder's turn when the first other client
        waiting has waited a quarter of its time, but not before the holder
        has had a quarter of its own (so calls kept waiting until their time
        is nearly out cannot cut every turn short)."""
        if self.holder is None:
            return
        for waiter in self.waiting:
            if waiter.who[1] != self.holder[1]:
                at = max(self.guard, waiter.claim_at)
                self.yield_at = at if self.yield_at is None else min(self.yield_at, at)


_turns = Turns()
_worker = _Worker()
atexit.register(_worker.kill)


def stop_worker() -> None:
    """Kill the worker now, whatever it is doing: for a process about to exit
    hard (``os._exit``), whose atexit hooks do not run. Not under the turn
    lock, which a call stuck on a compiling pattern holds."""
    proc = _worker.proc
    if proc is not None and proc.poll() is None:
        proc.kill()


class RegexScan:
    """A regular expression compiled in the worker, for one call.

    Use as a context manager: entering waits for the worker (until the
    deadline: ``Overrun``) and compiles the pattern (``INVALID_FIELD`` when it
    is invalid, needs more than the memory cap, or cannot compile in time).
    """

    def __init__(self, pattern: str, flags: int, deadline: float) -> None:
        self.pattern, self.flags, self.deadline = pattern, int(flags), deadline
        self.budget = deadline - time.monotonic()
        self.held, self.waited = False, 0.0
        self.who = CLIENT.get()
        #: whether the worker was stopped to give another client its turn (not at this call's deadline)
        self.gave_way = False

    def __enter__(self) -> RegexScan:
        asked = time.monotonic()
        if not _turns.take(self.who, self.deadline):
            raise Overrun()
        self.held = True
        #: how long this call waited for its turn (another call held the worker)
        self.waited = time.monotonic() - asked
        try:
            reply = self._ask(("compile", self.pattern, self.flags))
        except Overrun as overrun:
            self.__exit__()
            if (
                self.gave_way or self.waited > self.budget / 10 or isinstance(overrun, Starting)
            ):  # its turn ended too soon to judge the pattern
                raise
            raise errors.Dir2mcpError(
                errors.INVALID_FIELD, "the regular expression takes too long to compile"
            ) from None
        except BaseException:
            self.__exit__()
            raise
        if reply[0] == "error":
            self.__exit__()
            raise errors.Dir2mcpError(errors.INVALID_FIELD, f"invalid regular expression: {reply[1]}")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.held:
            self.held = False
            _turns.give_back()

    def _ask(self, message: _Request) -> _Reply:
        seconds = max(self.deadline - time.monotonic(), 0.001)
        try:
            reply = _worker.request((*message, seconds), self.deadline)
            # A worker that was starting: the call's budget counts from its
            # readiness, so neither the pattern nor a document is judged on
            # a budget the start ate (and, judged on a whole one, the next
            # call after a restart makes progress).
            self.deadline += _worker.ready_wait
        except Overrun:
            now = time.monotonic()
            self.gave_way = _turns.must_yield(now) and now < self.deadline
            raise
        except _Died:
            raise errors.Dir2mcpError(
                errors.INVALID_FIELD, "the regular expression could not be run (its matcher stopped)"
            ) from None
        if reply[0] == "memory":
            raise errors.Dir2mcpError(errors.INVALID_FIELD, "the regular expression needs too much memory")
        return reply

    def spans(self, text: str, batch: int) -> Iterator[tuple[int, int]]:
        """``(start, end)`` of each match in ``text``, ``batch`` per round trip;
        ``Overrun`` when the deadline passes first."""
        reply = self._ask(("scan", text, batch))
        while True:
            if reply[0] == "timeout":
                yield from reply[1]
                raise Overrun()
            yield from reply[1]
            if reply[2]:
                return
            reply = self._ask(("more", batch))


def worker_pid() -> int | None:
    """The worker's process id, while one runs (for tests and the bench)."""
    proc = _worker.proc
    return proc.pid if proc is not None and proc.poll() is None else None
