"""Logging filters named in settings.LOGGING."""

import logging


class OneLine(logging.Filter):
    """Drop the traceback of expected refusals (a bad Host header is an
    attack or a misconfigured proxy, not a bug): the message says it all."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True
