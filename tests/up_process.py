"""A running `dir2mcp up` process for tests, its output collected line by
line, and the ``running`` fixture that kills whatever a test leaves behind."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.support import TLS, wait_until
from tests.test_cli import REPO, base_env

#: The pause between looks of a wait whose predicate asks the server (stats,
#: a search): each look costs the server 19 ms of CPU (stats at 1,200 chunks)
#: to 34 (a search with the local model), so looks every 50 ms took 0.4-0.7
#: of a core from the indexing the test waits for (docs/benchmarks.md,
#: "Test suite time", session 31).
ASKING_EVERY = 0.5


class Up:
    """A running `up` process whose output is collected line by line."""

    def __init__(self, *args: str, env: dict | None = None, open_files: int | None = None):
        """``open_files``: the process's file-descriptor limit (RLIMIT_NOFILE), when given."""
        full_env = base_env()
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "up", *args],
            cwd=REPO,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=None if open_files is None else _limit_open_files(open_files),
        )
        self.lines: list[str] = []
        self.err: list[str] = []
        self._events: list[dict] = []
        self._parsed = 0  # lines of self.lines already read into self._events
        self._parsing = threading.Lock()
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.err), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _pump(self, stream, into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    @property
    def stdout(self) -> str:
        return "\n".join(self.lines)

    @property
    def stderr(self) -> str:
        return "\n".join(self.err)

    def events(self) -> list[dict]:
        """The NDJSON events so far. Each line is parsed once: waits poll
        this every 50 ms for as long as a pass runs."""
        with self._parsing:
            arrived = len(self.lines)
            for line in self.lines[self._parsed : arrived]:
                if line.startswith("{"):
                    self._events.append(json.loads(line))
            self._parsed = arrived
            return list(self._events)

    def wait_until(self, predicate, what: str, timeout: float = 90, interval: float = 0.05):
        """Wait for ``predicate(self)`` to be truthy as output arrives; fail
        at once if `up` has exited and all its output is read. ``interval``:
        the pause between looks (a predicate that asks the server takes
        ``ASKING_EVERY``)."""

        def seen():
            # whether it had all ended is read first: then no line can arrive after the predicate
            ended = self.proc.poll() is not None and not any(r.is_alive() for r in self._readers)
            value = predicate(self)
            if not value and ended:
                pytest.fail(
                    f"`up` exited ({self.proc.returncode}) before {what}:\n{self.stdout}\n{self.stderr}"
                )
            return value

        return wait_until(
            seen, timeout=timeout, interval=interval, message=lambda: f"{what}:\n{self.stdout}\n{self.stderr}"
        )

    def event(self, name: str, where=lambda data: True, timeout: float = 90) -> dict:
        def found(up):
            return next((e["data"] for e in up.events() if e["event"] == name and where(e["data"])), None)

        return self.wait_until(found, f"a {name} event", timeout)

    def url(self) -> str:
        """The endpoint URL, from the NDJSON connection event or the human block."""

        def found(up):
            for line in list(up.lines):
                if line.startswith("{"):
                    record = json.loads(line)
                    if record["event"] == "connection":
                        return record["data"]["url"]
                elif line.strip().startswith("URL:"):
                    return line.split("URL:", 1)[1].strip()
            return None

        return self.wait_until(found, "the endpoint URL")

    def rest(self, path: str, body: dict | None = None) -> httpx.Response:
        """A call on the REST mirror (``/api/v1/...``): GET, or POST with ``body``."""
        base = self.url().removesuffix("/mcp")
        with httpx.Client(timeout=30, verify=TLS) as client:
            return client.get(base + path) if body is None else client.post(base + path, json=body)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 90) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout)
        finally:
            self.kill()
        for reader in self._readers:
            reader.join(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def close(self) -> None:
        self.kill()
        for reader in self._readers:
            reader.join(10)
        self.proc.stdout.close()
        self.proc.stderr.close()


def logged_event(log: Path, name: str) -> dict | None:
    """The data of the first ``name`` NDJSON event a process (run with
    ``--json``) has written to ``log`` so far, or None. ``watch_ready``, say:
    the OS watch is in place, so a file written from then on is seen."""
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the last line, still being written
            if record.get("event") == name:
                return record["data"]
    return None


@pytest.fixture
def running():
    """Start `up` processes; whatever a test leaves running is killed."""
    started: list[Up] = []

    def start(*args: str, **kw) -> Up:
        up = Up(*args, **kw)
        started.append(up)
        return up

    yield start
    for up in started:
        up.close()


def _limit_open_files(limit: int):
    def limit_in_child() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    return limit_in_child
