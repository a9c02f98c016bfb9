"""A test-only crash hook for paid calls; inert unless ``DIR2MCP_TEST_CRASH_AT`` is set.

``DIR2MCP_TEST_CRASH_AT=<point>`` makes the process SIGKILL itself when a
paid call reaches ``<point>``, one of :data:`POINTS` (payments/gate.py):

* ``after_run``: the tool ran; its result is not stored yet;
* ``before_settle``: the result and the intent to settle are stored; the
  facilitator has not been asked;
* ``after_settle``: the facilitator settled; its answer is not stored yet;
* ``after_store``: the answer and its audit record are stored; the reply is
  not sent.

tests/test_payment_crash.py kills a real ``up`` process at each point and
checks what a retry with the same payment gets (docs/payments.md). Never set
it outside tests: the process dies, as it would in a real crash.
"""

from __future__ import annotations

import os
import signal

ENV = "DIR2MCP_TEST_CRASH_AT"
POINTS = ("after_run", "before_settle", "after_settle", "after_store")


def crash_point(point: str) -> None:
    """SIGKILL this process if ``DIR2MCP_TEST_CRASH_AT`` names ``point``."""
    if os.environ.get(ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
