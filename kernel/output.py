"""What every line the project writes for a person or a log goes through:
control characters escaped (:func:`printable`), and the UTC time stamp of
an event or an audit record (:func:`utc_stamp`)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

# Characters a terminal or a log reader acts on rather than shows: C0 and C1
# controls (newline, carriage return, ESC, CSI ...), DEL, the Unicode line and
# paragraph separators, and the bidirectional overrides that reorder text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object) -> str:
    """``text`` safe to write into one line of human output or a log line.

    File names come from whoever wrote the directory: a newline in one would
    forge a line of output, an ESC drive the terminal. Such characters are
    written the way ``repr`` writes them (``\\n``, ``\\x1b``, ``\\u202e``);
    everything else, other scripts included, is left as it is. NDJSON events
    need none of this: ``json.dumps`` escapes them already.
    """
    text = str(text)
    return _UNPRINTABLE.sub(_escape, text) if _UNPRINTABLE.search(text) else text


def printable_lines(text: object) -> str:
    """``text`` with each of its lines :func:`printable`, its line breaks
    kept: an answer, whose hits quote names and text from the directory."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def utc_stamp() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
