"""The process that compiles and runs ``dir2mcp.find`` regular expressions.

Started by :mod:`corpus.patterns` as ``python -I regex_worker.py LIMIT``: the
standard library and ``regex`` only, no Django. Its address space is capped
at LIMIT bytes (RLIMIT_AS), so a pattern that needs more gets MemoryError
here instead of growing the server; its parent kills it when a request
overruns its deadline, whatever the regex engine is doing (compiling holds
the GIL and checks no timeout). As a last resort each request arms an alarm
whose default action ends the process, so a worker whose parent is gone
cannot spin on.

Protocol on stdin/stdout: frames of an 8-byte little-endian length and a
``marshal`` payload (tuples of str, int, float). Once started (``regex``
imported: a fraction of a second on a busy machine, which the parent must
not count against a request) the worker sends ``("ready",)``. Requests:

* ``("compile", pattern, flags, seconds)`` -> ``("ok",)`` or ``("error", message)``
* ``("scan", text, count, seconds)`` -> ``("ok", spans, done)``: the first
  ``count`` matches of the compiled pattern, ``(start, end)`` in characters
* ``("more", count, seconds)`` -> the next ``count`` of the same scan

Any request may answer ``("timeout", spans)`` (the engine's own timeout) or
``("memory",)``; after ``("memory",)`` the worker exits.
"""

import marshal
import math
import os
import resource
import signal
import struct
import sys
from collections.abc import Iterator

_HEADER = struct.Struct("<Q")
_CACHE_SIZE = 16


def _read(size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = os.read(0, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _send(reply: tuple[str | bool | list[tuple[int, int]], ...]) -> None:
    payload = marshal.dumps(reply)
    data = _HEADER.pack(len(payload)) + payload
    while data:
        data = data[os.write(1, data) :]


def main() -> int:
    limit = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server stops us, not the terminal
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    try:
        os.nice(5)  # the server's own threads come first on a busy machine
    except OSError:
        pass
    import regex

    _send(("ready",))
    compiled: dict[tuple[object, ...], regex.Pattern[str]] = {}
    pattern: regex.Pattern[str] | None = None
    matches: Iterator[regex.Match[str]] | None = None
    while True:
        header = _read(_HEADER.size)
        if header is None:
            return 0
        payload = _read(_HEADER.unpack(header)[0])
        if payload is None:
            return 0
        request = marshal.loads(payload)
        op, seconds = request[0], request[-1]
        signal.alarm(math.ceil(seconds) + 2)  # SIGALRM's default action ends the process
        try:
            if op == "compile":
                key = request[1:3]
                if key not in compiled:
                    if len(compiled) >= _CACHE_SIZE:
                        compiled.pop(next(iter(compiled)))
                    compiled[key] = regex.compile(request[1], request[2])
                pattern, matches = compiled[key], None
                _send(("ok",))
                continue
            if op == "scan":
                assert pattern is not None  # the parent compiles before it scans
                matches = pattern.finditer(request[1], timeout=seconds)
            assert matches is not None  # the parent scans before it asks for more
            spans: list[tuple[int, int]] = []
            try:
                for match in matches:
                    spans.append(match.span())
                    if len(spans) >= request[-2]:
                        break
                else:
                    _send(("ok", spans, True))
                    continue
            except TimeoutError:
                _send(("timeout", spans))
                continue
            _send(("ok", spans, False))
        except MemoryError:
            _send(("memory",))
            return 0
        except (regex.error, ValueError, OverflowError, RecursionError) as exc:
            _send(("error", str(exc)))
        finally:
            signal.alarm(0)


if __name__ == "__main__":
    sys.exit(main())
