"""Storage over repeated switches and edits of the kernel (issue #37 item 5;
a benchmark, not a test).

bench/branch_switch.py's repository (``--subtrees`` of 6.12 and 6.1 as the
branches ``v6.12`` and ``v6.1``, under ``--work``), plus ``--edits``
branches made from ``v6.12``: edit ``i`` changes a third of its ``.c``
files (every ``return`` statement gets a comment naming the edit), so each
holds unit versions no other branch has, as a tree that keeps moving does.
Then, with ``reindex --incremental`` (what live sync runs) of the dir2mcp
at ``--code`` (this checkout by default, or another one to compare):

    v6.12 (first build), then v6.1, v6.12 (``--round-trips`` times),
    then edit 1 .. edit N, then v6.12 again

and after each step: ``meta.sqlite`` against the live representation text
(bench/branch_switch.py's ``storage``), the chunk rows live and in all,
the representation and document rows, the step's wall and CPU seconds (the
``reindex`` process), and what tombstone collection removed and its CPU
(its ``tombstones_collected`` event; none before collection existed).

    python bench/tombstones.py --subtrees kernel fs --work W
    python bench/tombstones.py --subtrees kernel fs --work W --code OTHER_CHECKOUT
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from branch_switch import environment, git, load, prepare, query, storage  # noqa: E402


def edit_branches(repo: Path, count: int) -> list[str]:
    """Branches ``edit1`` .. ``editN`` from ``v6.12`` (made once)."""
    names = [f"edit{i}" for i in range(1, count + 1)]
    have = set(git(repo, "branch", "--format=%(refname:short)").split())
    for i, name in enumerate(names, 1):
        if name in have:
            continue
        git(repo, "checkout", "-q", "-f", "v6.12")
        files = git(repo, "ls-files", "*.c").splitlines()
        for rel in files:
            if zlib.crc32(rel.encode()) % 3 != i % 3:
                continue
            path = repo / rel
            text = path.read_text(errors="surrogateescape")
            changed = text.replace("\treturn ", f"\treturn /* edit {i} */ ")
            if changed != text:
                path.write_text(changed, errors="surrogateescape")
        git(repo, "checkout", "-q", "-b", name)
        git(repo, "commit", "-q", "-a", "-m", f"edit {i}")
    git(repo, "checkout", "-q", "-f", "v6.12")
    return names


def reindex(code: Path, repo: Path, state: Path, env: dict[str, str], profile: Path | None = None) -> dict:
    """``reindex --incremental --json`` of ``repo``: its wall and CPU seconds
    and its tombstones_collected event; under cProfile into ``profile``
    when given (the writing process only: its preparing workers are not
    profiled, their CPU is still counted)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    profiling = ["-m", "cProfile", "-o", str(profile)] if profile else []
    done = subprocess.run(
        [sys.executable, *profiling, str(code / "manage.py"), "reindex", "--incremental", "--json"]
        + ["--dir", str(repo), "--state-dir", str(state)],
        cwd=code,
        env={**env, "PYTHONPATH": str(code)},
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(done.stderr[-4000:])
    collected = None
    for line in done.stdout.splitlines() + done.stderr.splitlines():
        if '"tombstones_collected"' in line:
            try:
                collected = json.loads(line).get("data")
            except ValueError:
                continue
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"seconds": round(wall, 1), "cpu_seconds": round(cpu, 1), "collected": collected}


def rows(db: Path) -> dict:
    def count(sql: str) -> int:
        return query(db, sql)[0][0]

    return {
        "chunks_live": count("SELECT count(*) FROM chunks WHERE deleted = 0"),
        "chunks_all": count("SELECT count(*) FROM chunks"),
        "representations": count("SELECT count(*) FROM representations"),
        "documents": count("SELECT count(*) FROM documents"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--subtrees", nargs="+", default=["kernel", "fs"])
    parser.add_argument("--code", type=Path, default=BENCH.parent, help="The dir2mcp checkout to run.")
    parser.add_argument("--round-trips", type=int, default=2)
    parser.add_argument("--edits", type=int, default=3)
    parser.add_argument("--label", default="", help="Names the state directory (to compare two --code).")
    parser.add_argument(
        "--share", type=float, default=None, help="ingest.tombstone_share (default: the configured default)."
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    repo = prepare(args.work, args.subtrees)
    edits = edit_branches(repo, args.edits)
    steps = ["v6.12"] + ["v6.1", "v6.12"] * args.round_trips + edits + ["v6.12"]
    state = args.work / f"state-tombstones-{args.label or 'run'}"
    shutil.rmtree(state, ignore_errors=True)
    db = state / "meta.sqlite"
    env = environment()
    if args.share is not None:
        env["DIR2MCP_INGEST__TOMBSTONE_SHARE"] = str(args.share)
    print(
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {load()}, subtrees {' '.join(args.subtrees)}, code {args.code}, share {args.share}",
        flush=True,
    )
    for ref in steps:
        git(repo, "checkout", "-q", "-f", ref)
        step = {"ref": ref, **reindex(args.code, repo, state, env)}
        found = storage(db)
        step |= {k: found[k] for k in ("text_mib", "meta_sqlite_mib", "wal_mib", "ratio")}
        step |= rows(db) | {"load": load()}
        print(json.dumps(step), flush=True)


if __name__ == "__main__":
    main()
