"""Keeping the file watch within the kernel's inotify limit (issue #37).

inotify takes one watch per directory, and Linux caps the watches one user
holds (``fs.inotify.max_user_watches``: 8,192 on older kernels, more by
memory on newer ones). A tree with more directories than that makes the OS
watch fail ("OS file watch limit reached"), which the watcher would set up
again and again while no change was seen. So before the watch starts the
tree's directories are counted against the limit (the count stops one past
it, so its cost is bounded by the limit, not the tree), and a tree over it,
or a watch that fails on the limit anyway (other programs hold watches too),
is polled instead: every file is stat'ed every few seconds, which sees every
change, later and at some CPU cost. A warning says so and how to raise the
limit.

``DIR2MCP_WATCH_MAX_DIRS`` sets a lower cap than the kernel's (for a machine
whose other watchers need theirs); it is also how the fallback is tested.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: Where Linux says how many inotify watches one user may hold.
MAX_USER_WATCHES = Path("/proc/sys/fs/inotify/max_user_watches")
#: Polling re-stats the whole tree each round: about a millisecond of delay
#: per directory, within these bounds (milliseconds).
POLL_MS_MIN = 1000
POLL_MS_MAX = 10_000
RAISE_HINT = (
    "raise the limit with `sudo sysctl fs.inotify.max_user_watches=524288` "
    "(and in /etc/sysctl.d/ to keep it), then restart dir2mcp"
)


def inotify_limit(source: Path = MAX_USER_WATCHES) -> int | None:
    """The kernel's cap on one user's inotify watches, as ``source`` states
    it; None where there is no such file (not Linux) or it cannot be read."""
    try:
        return int(source.read_text().strip())
    except (OSError, ValueError):
        return None


def configured_limit(environ: Mapping[str, str] = os.environ, source: Path = MAX_USER_WATCHES) -> int | None:
    """The most directories the OS watch may take: ``DIR2MCP_WATCH_MAX_DIRS``
    when set (a positive integer), else the kernel's limit."""
    raw = (environ.get("DIR2MCP_WATCH_MAX_DIRS") or "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    return inotify_limit(source)


def count_dirs(root: Path, *, stop_after: int | None = None) -> int:
    """The directories below ``root`` and itself, as a recursive inotify watch
    takes them (ignored ones too; symlinks not followed); counting stops
    once past ``stop_after``."""
    count, stack = 0, [str(root)]
    while stack:
        count += 1
        if stop_after is not None and count > stop_after:
            return count
        try:
            with os.scandir(stack.pop()) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue  # unreadable or gone: no watch there either
    return count


def is_limit_error(exc: BaseException) -> bool:
    """Whether a failed watch ran into the inotify limit (watchfiles' words, or ENOSPC)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return "watch limit" in str(exc).lower()


@dataclass(frozen=True)
class WatchPlan:
    """How to watch a tree: by the OS, or by polling every ``poll_ms`` and why."""

    polling: bool
    poll_ms: int = 300
    reason: str = ""


def poll_ms_for(dirs: int) -> int:
    return min(POLL_MS_MAX, max(POLL_MS_MIN, dirs))


def plan(root: Path, *, limit: int | None, forced: bool = False) -> WatchPlan:
    """The OS watch when the tree's directories fit within ``limit`` (or no
    limit is known), else polling with the reason to show."""
    if forced:
        return WatchPlan(polling=True, reason="DIR2MCP_WATCH_POLLING=1")
    if limit is None:
        return WatchPlan(polling=False)
    dirs = count_dirs(root, stop_after=limit)
    if dirs <= limit:
        return WatchPlan(polling=False)
    return WatchPlan(
        polling=True,
        poll_ms=poll_ms_for(dirs),
        reason=(
            f"the tree has more than {limit} directories, the inotify watch limit "
            f"(fs.inotify.max_user_watches or DIR2MCP_WATCH_MAX_DIRS): changes are found by polling "
            f"every {poll_ms_for(dirs) / 1000:g} s instead; {RAISE_HINT}"
        ),
    )


def after_failure(exc: BaseException, root: Path) -> WatchPlan:
    """Polling, for a watch that failed on the inotify limit (other programs'
    watches count against it too)."""
    dirs = count_dirs(root, stop_after=POLL_MS_MAX)
    return WatchPlan(
        polling=True,
        poll_ms=poll_ms_for(dirs),
        reason=(
            f"the OS file watch hit the inotify limit ({exc}): changes are found by polling every "
            f"{poll_ms_for(dirs) / 1000:g} s instead; {RAISE_HINT}"
        ),
    )
