"""The stdout guard of MCP over stdio (see :mod:`mcp_gateway.stdio`).

It imports nothing from the project, so it works before Django is set up
and can be tested in a bare interpreter.
"""

from __future__ import annotations

import os
import sys
from typing import BinaryIO


class StdoutGuard:
    """Reserve the real stdout for protocol messages.

    On enter, file descriptor 1 and ``sys.stdout`` are pointed at stderr (so
    ``print``, logging handlers bound to ``sys.__stdout__`` and inherited
    child processes all land there) and a private binary handle on the
    original stdout is returned. On exit both are restored.
    """

    def __enter__(self) -> BinaryIO:
        for stream in (sys.stdout, sys.__stdout__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):
                pass
        self._saved_stdout = sys.stdout
        self.protocol = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        return self.protocol

    def __exit__(self, *exc_info: object) -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        sys.stdout = self._saved_stdout
        try:
            self.protocol.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self.protocol.fileno(), 1)
        try:
            self.protocol.close()
        except OSError:
            pass
