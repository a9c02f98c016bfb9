"""What judging a made-up path costs, by its depth (issue #34; a benchmark, not a test).

A client may name any path; before the fix the exclusion verdict rebuilt and
matched every prefix of it, so a path of N segments cost N² (4,000 segments
10 s). This times ``ExclusionEngine.excluded_reason`` (the verdict alone: it
takes paths past the request bounds, so the growth shows) and
``ExclusionEngine.resolve`` (what every surface calls, bounds included) on
paths of growing depth that name nothing on disk, under the default rules
and a root ``.gitignore``. Linear cost shows as a steady time per segment.

    python bench/containment.py --rounds 5
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

from corpus.security import MAX_PATH_SEGMENTS, ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import DEFAULT_PATH_EXCLUDES, DEFAULT_SECRET_PATTERNS

DEPTHS = (250, 1_000, 4_000, 16_000, 64_000)


def best_of(rounds: int, fn) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def resolve_or_code(engine: ExclusionEngine, path: str) -> str:
    try:
        engine.resolve(path)
    except errors.Dir2mcpError as exc:
        return exc.code
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="containment-"))
    (root / ".gitignore").write_text("*.log\nsecret/\n")
    (root / "docs").mkdir()
    engine = ExclusionEngine(
        root, ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), tuple(DEFAULT_SECRET_PATTERNS))
    )
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("segments  verdict_ms  us/segment  resolve")
    for depth in DEPTHS:
        path = "docs/" + "/".join(["a"] * (depth - 1))
        seconds = best_of(args.rounds, lambda path=path: engine.excluded_reason(path))
        code = resolve_or_code(engine, path)
        print(f"{depth:>8}  {seconds * 1000:>10.2f}  {seconds * 1e6 / depth:>10.3f}  {code}")
    at_bound = "docs/" + "/".join(["a"] * (MAX_PATH_SEGMENTS - 2))
    seconds = best_of(args.rounds, lambda: resolve_or_code(engine, at_bound))
    print(f"resolve at the bound ({MAX_PATH_SEGMENTS - 1} segments): {seconds * 1000:.2f} ms")


if __name__ == "__main__":
    main()
