"""Files rewritten the ways their owners rewrite them, for the race tests.

No Django here: ``python -m tests.churn ROOT STOP SEED PAUSE PATH...``
rewrites the given files in a process of its own (so a reader in another
process meets it at full speed, not at the test's GIL's pace) until the file
STOP exists, then prints its counts as JSON.

A version is numbered ASCII marker lines (``f3 v17 L5 ok`` on line 2k-1),
each followed by a line of multi-byte UTF-8: :func:`mixing` finds an answer
that holds two versions, or lines shifted from where they belong, in the
markers alone, whatever codec decoded the rest.
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
from collections import Counter
from pathlib import Path

PAYLOAD = "héllo wörld ✓ 漢字 ünïcödé ∑ 𝄞 "
MARKER = re.compile(r"f(\d+) v(\d+) L(\d+) ok")
ACTIONS = ("in_place", "in_place", "in_pieces", "cut", "rename", "delete", "wide")


def version(i: int, v: int, lines: int, width: int = 6) -> bytes:
    """Version ``v`` of file ``i``: ``lines`` marker lines, each followed by a
    payload line (``width`` times PAYLOAD): line 2k-1 is ``f{i} v{v} L{k} ok``."""
    body = "".join(f"f{i} v{v} L{k} ok\n  {PAYLOAD * width}\n" for k in range(1, lines + 1))
    return body.encode("utf-8")


def cut_inside_a_character(data: bytes, rng: random.Random) -> bytes:
    """``data`` cut at an odd offset inside a multi-byte UTF-8 character."""
    inside = [k for k in range(1, len(data)) if data[k] & 0xC0 == 0x80 and k % 2]
    return data[: rng.choice(inside)]


def mixing(content: str, start_line: int = 1) -> str | None:
    """Why ``content`` (lines from ``start_line``) is not one version of one
    file, or None. Marker lines must all name one version and sit on their
    own line numbers (2k-1). A prefix of a version passes: a version cut on
    purpose, or a file read between its truncation and its last write, which
    is what the file held at that moment."""
    found = set()
    for offset, line in enumerate(content.split("\n")):
        marker = MARKER.fullmatch(line)
        if marker:
            file_, v, k = map(int, marker.groups())
            found.add((file_, v))
            if start_line + offset != 2 * k - 1:
                return f"marker L{k} on line {start_line + offset}"
    if len(found) > 1:
        return f"versions mixed: {sorted(found)}"
    return None


def rewrite(path: Path, i: int, v: int, rng: random.Random, lines: tuple[int, int]) -> str:
    """Give ``path`` version ``v`` (of file ``i``) one way or another; the way."""
    data = version(i, v, rng.randint(*lines))
    action = rng.choice(ACTIONS)
    if action == "in_place":  # truncated, then written again where it stands
        with open(path, "wb") as f:
            f.write(data)
    elif action == "in_pieces":  # an editor writing block by block
        with open(path, "wb") as f:
            for start in range(0, len(data), 4093):
                f.write(data[start : start + 4093])
                f.flush()
    elif action == "cut":  # left cut inside a multi-byte character
        path.write_bytes(cut_inside_a_character(data, rng))
    elif action == "rename":  # an atomic save: a new file renamed over the old one
        spare = path.with_name(f".{path.name}.new")
        spare.write_bytes(data)
        spare.replace(path)
    elif action == "delete":
        path.unlink(missing_ok=True)
    else:  # UTF-16 with its byte-order mark, sometimes cut at an odd byte
        wide = data.decode().encode("utf-16")
        path.write_bytes(wide if rng.random() < 0.5 else wide[: rng.randrange(3, len(wide), 2)])
    return action


def churn(root: Path, stop: Path, seed: int, pause: float, paths: list[str]) -> Counter:
    rng, counts, v = random.Random(seed), Counter(), 0
    while not stop.exists():
        i = rng.randrange(len(paths))
        v += 1
        try:
            counts[rewrite(root / paths[i], i, v, rng, (40, 400))] += 1
        except OSError:
            counts["os_error"] += 1
        if rng.random() < 0.03:  # the .gitignore too, sometimes caught before its last character
            tail = rng.choice(("", "build\\", "!", "[z-a]\n"))
            (root / ".gitignore").write_text("ignored_*.txt\n" + tail)
            counts["gitignore"] += 1
        time.sleep(pause)
    return counts


if __name__ == "__main__":
    root, stop, seed, pause, *paths = sys.argv[1:]
    counts = churn(Path(root), Path(stop), int(seed), float(pause), paths)
    sys.stdout.write(json.dumps(dict(counts)) + "\n")
