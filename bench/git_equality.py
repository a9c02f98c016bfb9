"""Git-equality benchmark (not a test): the walk against ``git ls-files`` on a big tree.

    python bench/git_equality.py TREE [--make-repo] [--runs 3]

``TREE`` is a source tree, e.g. the Linux kernel from Debian's
``linux-source-6.12`` (``tar xJf /usr/src/linux-source-6.12.tar.xz``).

1. As shipped: the walk over ``TREE`` with the default policy, what it found,
   what it left out by reason and the coverage warning the indexer would give
   (Debian's tarball has a top-level ``.gitignore`` of ``/*``: 0 files).
2. With ``--make-repo`` (once; kept between runs): Debian's packaging lines
   are dropped from the top ``.gitignore`` and ``TREE`` becomes a git
   repository (``git init``, ``git add -A``).
3. In a git repository: the walk and ``git ls-files --cached --others
   --exclude-standard`` each timed (best of ``--runs``), their file sets
   compared (every difference must be a policy exclusion, named by reason),
   and the walk's peak Python memory (tracemalloc) against the size of the
   list of paths it yields: the walk holds a stack of directories, not the tree.

Results go to bench/results/git_equality.json and stdout as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpus.ingest.discover import FileEntry, walk  # noqa: E402
from corpus.ingest.exclusions import ExclusionTally, coverage_warning, reason_kind  # noqa: E402
from corpus.security import ExclusionEngine, ExclusionPolicy  # noqa: E402
from kernel.config import DEFAULT_PATH_EXCLUDES, DEFAULT_SECRET_PATTERNS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEBIAN_MARK = "# Debian packaging"


def engine(tree: Path) -> ExclusionEngine:
    policy = ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), tuple(DEFAULT_SECRET_PATTERNS))
    return ExclusionEngine(tree, policy)


def walked(tree: Path) -> tuple[list[str], ExclusionTally, float, float]:
    """The walk's files, its tally, and its wall and CPU seconds (the CPU of
    the git it runs included: on a loaded machine CPU time is the fairer figure)."""
    tally = ExclusionTally()
    started, cpu = time.perf_counter(), _cpu()
    paths = [item.rel_path for item in walk(engine(tree), tally=tally) if isinstance(item, FileEntry)]
    return paths, tally, time.perf_counter() - started, _cpu() - cpu


def git_listed(tree: Path) -> tuple[list[str], float, float]:
    started, cpu = time.perf_counter(), _cpu()
    done = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=tree,
        capture_output=True,
        check=True,
    )
    seconds, cpu = time.perf_counter() - started, _cpu() - cpu
    return sorted({os.fsdecode(p) for p in done.stdout.split(b"\0") if p}), seconds, cpu


def _cpu() -> float:
    """CPU seconds of this process and of the children it waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _kind(eng: ExclusionEngine, tree: Path, rel: str) -> str:
    """Why the walk left out a file git lists: a symlink it does not follow, or the engine's reason."""
    if (tree / rel).is_symlink():
        return "symlink"
    return reason_kind(eng.excluded_reason(rel) or "NOT EXCLUDED")


def make_repo(tree: Path) -> None:
    gitignore = tree / ".gitignore"
    text = gitignore.read_text()
    if DEBIAN_MARK in text:
        cut = text.index(DEBIAN_MARK)
        gitignore.write_text(text[: text.rfind("\n#", 0, cut) + 1])
    if not (tree / ".git").exists():
        subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
        subprocess.run(["git", "add", "-A"], cwd=tree, check=True)


def shipped(tree: Path) -> dict:
    paths, tally, seconds = walked(tree)
    return {
        "walked_files": len(paths),
        "seconds": round(seconds, 3),
        "excluded": tally.by_kind(),
        "top_reasons": tally.reasons.most_common(5),
        "warning": coverage_warning(len(paths), indexed=len(paths), git_tracked=None, tally=tally),
    }


def compared(tree: Path, runs: int) -> dict:
    walks = [walked(tree) for _ in range(runs)]
    gits = [git_listed(tree) for _ in range(runs)]
    paths, tally = walks[0][:2]
    listed = gits[0][0]
    ours, theirs = set(paths), set(listed)
    eng = engine(tree)
    only_git = Counter(_kind(eng, tree, p) for p in theirs - ours)
    tracemalloc.start()
    count = sum(1 for item in walk(engine(tree)) if isinstance(item, FileEntry))
    _, walk_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tracemalloc.start()
    held = [item.rel_path for item in walk(engine(tree)) if isinstance(item, FileEntry)]
    _, list_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    walk_best, git_best = min(w[2] for w in walks), min(g[1] for g in gits)
    walk_cpu, git_cpu = min(w[3] for w in walks), min(g[2] for g in gits)
    return {
        "walked_files": len(ours),
        "git_files": len(theirs),
        "equal_but_policy": not (ours - theirs) and "other" not in only_git,
        "only_in_walk": sorted(ours - theirs)[:20],
        "only_in_git_by_reason": dict(only_git),
        "only_in_git_examples": sorted(theirs - ours)[:20],
        "excluded": tally.by_kind(),
        "walk_seconds_best": round(walk_best, 3),
        "git_ls_files_seconds_best": round(git_best, 3),
        "walk_over_git": round(walk_best / git_best, 1),
        "walk_cpu_seconds_best": round(walk_cpu, 2),
        "git_ls_files_cpu_seconds_best": round(git_cpu, 2),
        "walk_over_git_cpu": round(walk_cpu / git_cpu, 1),
        "walk_peak_python_mb": round(walk_peak / 2**20, 1),
        "walk_and_hold_paths_peak_mb": round(list_peak / 2**20, 1),
        "files_counted_under_tracemalloc": count,
        "held_paths": len(held),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("tree", type=Path)
    parser.add_argument("--make-repo", action="store_true", help="drop Debian's lines, git init + add -A")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each side (best is kept)")
    args = parser.parse_args()
    tree = args.tree.resolve()
    result: dict = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg(),
        "tree": tree.name,
    }
    if not (tree / ".git").exists():
        result["as_shipped"] = shipped(tree)
    if args.make_repo:
        make_repo(tree)
    if (tree / ".git").exists():
        result["git"] = compared(tree, args.runs)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "git_equality.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
