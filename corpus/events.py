"""What a person or a script sees while work runs (spec §3).

One :class:`Reporter` per command. Human mode prints plain lines and a
``Progress:`` line (rewritten in place on a TTY, periodic otherwise); JSON
mode prints one NDJSON event per line. Nothing secret is ever passed here.
"""

from __future__ import annotations

import io
import json
import sys
import time
from typing import IO

from corpus.counters import PROGRESS_FIELDS
from kernel.jsontypes import JsonObject
from kernel.output import printable, utc_stamp


def format_progress(counters: dict[str, int]) -> str:
    """The §3.1 progress line."""
    parts = [f"{label}={counters.get(key, 0)}" for label, key in PROGRESS_FIELDS]
    return "Progress: " + " ".join(parts)


class Reporter:
    """Writes human lines or NDJSON events to one stream."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        json_mode: bool = False,
        quiet: bool = False,
        interval: float = 2.0,
    ) -> None:
        self.stream = stream or sys.stdout
        self.json_mode = json_mode
        self.quiet = quiet
        self.interval = interval
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_progress = 0.0
        self._line_open = False

    @classmethod
    def silent(cls) -> Reporter:
        """A reporter that prints nothing (services called without one)."""
        return cls(io.StringIO(), quiet=True)

    def event(self, event: str, data: JsonObject | None = None, *, level: str = "info") -> None:
        """Emit an NDJSON event (JSON mode only)."""
        if not self.json_mode:
            return
        record = {"ts": utc_stamp(), "level": level, "event": event, "data": data or {}}
        self._write(json.dumps(record, default=str) + "\n")

    def say(self, text: str) -> None:
        """A human line (not in JSON or quiet mode); control characters are escaped."""
        if self.json_mode or self.quiet:
            return
        self._write(printable(text) + "\n")

    def warn(self, text: str, **data: object) -> None:
        if self.json_mode:
            self.event("warning", {"message": text, **data}, level="warn")
        else:
            self._write(f"WARNING: {printable(text)}\n")

    def file_error(self, rel_path: str, code: str, message: str) -> None:
        if self.json_mode:
            self.event("file_error", {"rel_path": rel_path, "code": code, "message": message}, level="warn")
        elif not self.quiet and not self.tty:
            self._write(f"file_error: {printable(rel_path)}: {printable(code)}: {printable(message)}\n")

    def documents_changed(self, rel_paths: list[str], *, listing: bool = False) -> None:
        """The indexer (re)wrote or tombstoned these documents (committed);
        ``listing``: some were added or removed. Nothing is printed: a server
        turns this into MCP resource notifications (mcp_gateway/notify.py)."""

    def progress(self, counters: dict[str, int], *, final: bool = False, running: bool = True) -> None:
        """Report counters, throttled to ``interval`` unless ``final``."""
        now = time.monotonic()
        if not final and now - self._last_progress < (0.2 if self.tty else self.interval):
            return
        self._last_progress = now
        if self.json_mode:
            data = {**counters, "running": running and not final}
            self.event("scan_progress", data)
            self.event("embed_progress", {k: counters.get(k, 0) for k in ("chunks_total", "embedded_ok")})
            return
        if self.quiet:
            return
        line = format_progress(counters)
        if self.tty:
            self._write("\r\x1b[K" + line + ("\n" if final else ""), newline=not final)
        else:
            self._write(line + "\n")

    def _write(self, text: str, *, newline: bool = False) -> None:
        if self._line_open and not text.startswith("\r"):
            self.stream.write("\n")
        self.stream.write(text)
        self.stream.flush()
        self._line_open = newline
