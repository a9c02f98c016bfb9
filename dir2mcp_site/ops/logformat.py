"""Log lines: plain text by default, or one JSON object per line
(``DIR2MCP_LOG_FORMAT=json``)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from types import TracebackType

from kernel.output import printable

# What sys.exc_info() returns, as logging.Formatter.formatException takes it.
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]


class PlainFormatter(logging.Formatter):
    """The default text format, one line per message: control characters in
    the message (a newline or an ESC in a file name) are escaped, so no name
    can forge a log line or drive the terminal. A traceback keeps its line
    breaks; other control characters in it are escaped as well."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's naming)
        message = record.message
        record.message = printable(message)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message

    def formatException(self, ei: ExcInfo) -> str:  # noqa: N802
        return "\n".join(printable(line) for line in super().formatException(ei).split("\n"))


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message"}``, plus ``exc`` for a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
