"""File names cannot forge lines or drive the terminal (issue #23).

A file named with a newline once printed a line of its choosing
(``file_error: … SECRET_DETECTED …``) in the output of `reindex` and `up`.
Human output and log lines now show such characters escaped (``\\n``,
``\\x1b``); NDJSON events keep the name exact, JSON-encoded.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from corpus.events import Reporter
from dir2mcp_site.ops.logformat import PlainFormatter
from kernel.output import printable
from tests.test_cli import cli
from tests.up_process import Up

FORGED = "file_error: forged.txt: SECRET_DETECTED: content matches secret_patterns[0]"
# An unreadable PDF (so its name is reported as a file_error), whose name
# carries a forged line and an ANSI sequence that would clear the line.
HOSTILE = f"bad\n{FORGED}\x1b[2K\u202e.pdf"
ESCAPED = (
    "bad\\nfile_error: forged.txt: SECRET_DETECTED: content matches secret_patterns[0]\\x1b[2K\\u202e.pdf"
)


def hostile_root(root: Path) -> Path:
    (root / "notes.txt").write_text("hnsw index notes\n")
    (root / HOSTILE).write_bytes(b"%PDF-1.4 not really a pdf")
    return root


def assert_no_forgery(text: str) -> None:
    assert "\x1b" not in text
    assert "\u202e" not in text
    lines = text.splitlines()
    assert not any(line.startswith(FORGED) for line in lines), text
    assert not any(line.startswith("file_error: forged.txt") for line in lines), text


def test_printable_escapes_controls_and_keeps_everything_else():
    assert printable("plain name.txt") == "plain name.txt"
    assert printable("café/漢字 ok.md") == "café/漢字 ok.md"
    assert printable("a\nb\rc\td") == "a\\nb\\rc\\td"
    assert printable("\x1b[31mred\x7f\x9b") == "\\x1b[31mred\\x7f\\x9b"
    assert printable("x\u2028y\u202ez") == "x\\u2028y\\u202ez"


def test_reindex_and_status_print_the_name_escaped(tmp_path):
    root = hostile_root(tmp_path)
    done = cli("reindex", "--dir", str(root))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith(f"file_error: {ESCAPED}: EXTRACT_FAILED") for line in lines), done.stdout
    assert_no_forgery(done.stdout + done.stderr)

    status = cli("status", "--dir", str(root))
    assert status.returncode == 0, status.stderr
    assert f"  {ESCAPED}: EXTRACT_FAILED" in status.stdout, status.stdout
    assert_no_forgery(status.stdout + status.stderr)


def test_ndjson_events_keep_the_exact_name(tmp_path):
    root = hostile_root(tmp_path)
    done = cli("reindex", "--dir", str(root), "--json")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    names = [e["data"]["rel_path"] for e in events if e["event"] == "file_error"]
    assert names == [HOSTILE]
    assert "\x1b" not in done.stdout  # json.dumps writes it \u001b


@pytest.mark.slow
def test_up_prints_the_name_escaped(tmp_path):
    root = hostile_root(tmp_path)
    up = Up("--dir", str(root))
    try:
        line = up.wait_until(
            lambda up: next((line for line in list(up.lines) if line.startswith("file_error:")), None),
            "the file_error line",
        )
        assert line.startswith(f"file_error: {ESCAPED}: EXTRACT_FAILED"), line
        up.wait_until(lambda up: any("errors=1" in line for line in list(up.lines)), "the final progress")
        assert up.stop() == 0, up.stderr[-3000:]
    finally:
        up.close()
    assert_no_forgery(up.stdout + "\n" + up.stderr)


def test_log_lines_escape_the_message_and_keep_the_traceback_lines():
    # Django configured logging from settings.LOGGING: the root handler's formatter.
    formatter = logging.getLogger().handlers[0].formatter
    assert isinstance(formatter, PlainFormatter)
    record = logging.LogRecord(
        "corpus.ingest.pipeline", logging.ERROR, __file__, 1, "failed to store %s", (HOSTILE,), None
    )
    try:
        raise ValueError(f"cannot read {HOSTILE}")
    except ValueError:
        record.exc_info = sys.exc_info()
    text = formatter.format(record)
    first, *traceback = text.split("\n")
    assert first.endswith(f"ERROR corpus.ingest.pipeline failed to store {ESCAPED}")
    assert traceback[0] == "Traceback (most recent call last):"
    assert "\x1b" not in text and "\u202e" not in text
    assert (
        record.getMessage() == f"failed to store {HOSTILE}"
    )  # other handlers still get the record as it was


def test_the_human_reporter_escapes_warnings_and_lines():
    stream = _Stream()
    reporter = Reporter(stream)
    reporter.say(f"Indexed {HOSTILE}")
    reporter.warn(f"cannot watch {HOSTILE}")
    reporter.file_error(HOSTILE, "EXTRACT_FAILED", f"not a readable PDF: {HOSTILE}")
    lines = stream.text.splitlines()
    assert lines == [
        f"Indexed {ESCAPED}",
        f"WARNING: cannot watch {ESCAPED}",
        f"file_error: {ESCAPED}: EXTRACT_FAILED: not a readable PDF: {ESCAPED}",
    ]


class _Stream:
    """A non-TTY text stream."""

    def __init__(self):
        self.text = ""

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass
