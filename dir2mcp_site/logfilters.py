"""Logging filters named in settings.LOGGING."""

import logging
import threading
import time


class OneLine(logging.Filter):
    """Drop the traceback of expected refusals (a bad Host header is an
    attack or a misconfigured proxy, not a bug): the message says it all."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


class Throttled(logging.Filter):
    """Each logger's records as a budget of :attr:`LINES` lines, given back
    at :attr:`LINES` every :attr:`WINDOW` seconds; past it records are
    dropped, and the next one logged says how many. For the refusals anyone
    may cause without the token (a foreign ``Host``, from any web page by
    DNS rebinding; a static path climbing out of its directory): one line
    each, at the sender's rate, grew the log without bound (session 28)."""

    LINES = 10
    WINDOW = 60.0

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._budgets: dict[str, tuple[float, float, int]] = {}  # logger: (lines left, when, dropped)

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        with self._lock:
            left, then, dropped = self._budgets.get(record.name, (float(self.LINES), now, 0))
            left = min(float(self.LINES), left + (now - then) * self.LINES / self.WINDOW)
            if left < 1:
                self._budgets[record.name] = (left, now, dropped + 1)
                return False
            self._budgets[record.name] = (left - 1, now, 0)
        if dropped:
            record.msg = f"{record.getMessage()} ({dropped} more like it were not logged)"
            record.args = None
        return True
