"""A branch switch on the Linux kernel under live sync (issue #37 item 3; a
benchmark, not a test).

Unpacks Debian's ``linux-source-6.1`` and ``linux-source-6.12`` tarballs
into ``--work`` (kept between runs), drops Debian's packaging lines from
their top ``.gitignore`` (as bench/big_tree.py does), and commits the same
subtrees of each (``--subtrees``; the whole tree with ``.``) as two branches
of one git repository, ``v6.12`` and ``v6.1``. Then, in one run:

1. ``up --json`` on the ``v6.12`` checkout: its first pass is the clean
   build of 6.12, measured as bench/big_tree.py measures a pass (files, CPU
   and load every minute; searches over MCP during and after it against an
   ``up --no-index`` server on the same state, every ``--search-interval``
   seconds; ``find``; peak RSS of each process; the walk's coverage against
   git), then ``meta.sqlite`` against the text it indexes and its bytes by
   table (``dbstat``);
2. a clean build of 6.1, the reference: ``up --json`` on a second work
   tree of ``v6.1`` with a state directory of its own, to its
   ``lexical_index_complete``; after step 1 (the 6.12 server idle), or
   beside it with ``--together`` (then compare CPU, not wall);
3. ``git checkout v6.1`` under the 6.12 server: the time until the index
   holds what the clean build of 6.1 holds (every live document with 6.1's
   content hash, no job running), the index jobs it took, the
   ``scan_progress`` events it printed, and search latency over MCP during
   it against the same server's before and after it; then the switched
   index is compared with the clean build (the same documents, and for each
   the same chunk texts and contexts in order, by hash);
4. ``git checkout v6.12`` back: its time against the first pass, whether
   the index then equals the first pass's in the same way, and how many of
   the live chunks then were kept through both switches, revived
   (tombstoned by the first switch, brought back with their id and vector)
   or created (the only ones that would be embedded).

Time is wall-clock (``time.monotonic``) and CPU-seconds of the server, its
indexing child and the child's preparing workers (``/proc/<pid>/stat``),
each as a ratio to the clean build in the same run; the load average is
printed at each step.

    python bench/branch_switch.py --subtrees drivers/net fs kernel
    python bench/branch_switch.py --subtrees . --together --search-interval 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

# bench/big_tree.py's packaging rule and searcher, and bench/serving.py's server
from big_tree import (  # noqa: E402
    DEBIAN_PACKAGING,
    Mcp,
    Searcher,
    children,
    progress,
    sample,
    say,
    sizes,
)
from big_tree import cpu_seconds as process_cpu_seconds  # noqa: E402
from serving import Server  # noqa: E402

sys.path.insert(0, str(BENCH.parent))
from corpus.packed import unpack  # noqa: E402  (the texts the database stores compressed)

TARBALLS = {
    "6.12": Path("/usr/src/linux-source-6.12.tar.xz"),
    "6.1": Path("/usr/src/linux-source-6.1.tar.xz"),
}


def git(repo: Path, *args: str, **env: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    ).stdout


def unpacked(version: str, work: Path) -> Path:
    """The tarball's tree under ``work``, its packaging lines dropped (kept)."""
    tree = work / f"linux-source-{version}"
    if not tree.is_dir():
        say(f"unpacking {TARBALLS[version]}")
        subprocess.run(["tar", "-xf", str(TARBALLS[version]), "-C", str(work)], check=True)
    ignore = tree / ".gitignore"
    lines = ignore.read_text().splitlines()
    kept = [line for line in lines if line.strip() not in DEBIAN_PACKAGING]
    if kept != lines:
        ignore.write_text("\n".join(kept) + "\n")
    return tree


def prepare(work: Path, subtrees: list[str]) -> Path:
    """A repository whose branches ``v6.12`` and ``v6.1`` hold ``subtrees``
    of each version, checked out at ``v6.12``; made once per set of subtrees."""
    name = "repo-" + ("whole" if subtrees == ["."] else "-".join(s.replace("/", "_") for s in subtrees))
    repo = work / name
    if (repo / ".git").is_dir():
        git(repo, "checkout", "-q", "-f", "v6.12")
        return repo
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    index = str(work / f".{name}.index")
    for version in ("6.12", "6.1"):
        tree = unpacked(version, work)
        Path(index).unlink(missing_ok=True)
        add = ["--git-dir", str(repo / ".git"), "add"]
        git(tree, *add, "-A", "--", *subtrees, GIT_INDEX_FILE=index)
        # The top .gitignore's ``.*`` ignores the .gitignore files, which the
        # kernel's own repository tracks.
        ignores = [".gitignore"] + [
            str(p.relative_to(tree)) for sub in subtrees for p in (tree / sub).rglob(".gitignore")
        ]
        git(tree, *add, "-f", "--", *ignores, GIT_INDEX_FILE=index)
        written = git(repo, "write-tree", GIT_INDEX_FILE=index).strip()
        commit = git(repo, "commit-tree", written, "-m", f"linux {version}").strip()
        git(repo, "update-ref", f"refs/heads/v{version}", commit)
    Path(index).unlink(missing_ok=True)
    git(repo, "checkout", "-q", "-f", "v6.12")
    return repo


def changed_files(repo: Path) -> dict:
    out = git(repo, "diff", "--name-status", "--no-renames", "v6.12", "v6.1")
    kinds = [line.split("\t", 1)[0] for line in out.splitlines()]
    return {
        "changed": kinds.count("M"),
        "only_in_6.1": kinds.count("A"),
        "only_in_6.12": kinds.count("D"),
        "files_6.12": len(git(repo, "ls-tree", "-r", "--name-only", "v6.12").splitlines()),
        "files_6.1": len(git(repo, "ls-tree", "-r", "--name-only", "v6.1").splitlines()),
    }


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL"))}
    env["DIR2MCP_EMBED__PROVIDER"] = "none"
    # The indexing child at this process's niceness (run the bench under
    # `nice`), not 10 below it: on a shared machine it would get next to no
    # CPU, and every step is measured the same way.
    env["DIR2MCP_SERVER__INDEXER_NICE"] = "0"
    return env


def cpu_seconds(server: Server) -> float:
    """User and system CPU of the server, its children and their preparing
    workers (live, and those reaped) so far."""
    total = 0.0
    for pid in server.pids():
        total += process_cpu_seconds(pid, reaped=True)
        total += sum(process_cpu_seconds(worker) for worker in children(pid))
    return total


def query(db: Path, sql: str, params=()) -> list[tuple]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def live_hashes(db: Path) -> dict[str, str]:
    return dict(query(db, "SELECT rel_path, content_hash FROM documents WHERE deleted = 0"))


def running_jobs(db: Path) -> int:
    return query(db, "SELECT count(*) FROM index_jobs WHERE running = 1")[0][0]


def jobs(db: Path) -> int:
    return query(db, "SELECT count(*) FROM index_jobs")[0][0]


def unit_hashes(db: Path) -> dict[str, tuple[int, str]]:
    """Each live document's chunks: how many, and one hash over their texts
    and contexts in order (a chunk that is a slice is cut from its
    representation's text, read once per representation: the whole tree's
    chunks with a copy of their file's text each would not fit in memory)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    found: dict[str, tuple[int, str]] = {}
    try:
        rows = conn.execute(
            "SELECT d.rel_path, c.representation_id, c.context, c.text, c.text_start, c.text_end "
            "FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id "
            "WHERE c.deleted = 0 AND d.deleted = 0 ORDER BY d.rel_path, c.ordinal",
        )
        rep_id, rep_text = None, ""
        current, count, digest = None, 0, hashlib.sha256()
        for rel, rep, context, stored, start, end in rows:
            if rel != current:
                if current is not None:
                    found[current] = (count, digest.hexdigest())
                current, count, digest = rel, 0, hashlib.sha256()
            if start is None:
                text = unpack(stored)
            else:
                if rep != rep_id:
                    got = conn.execute("SELECT text FROM representations WHERE rep_id = ?", (rep,))
                    rep_id, rep_text = rep, unpack(got.fetchone()[0])
                text = rep_text[start:end]
            count += 1
            digest.update(hashlib.sha256(f"{context}\n{text}".encode()).digest())
        if current is not None:
            found[current] = (count, digest.hexdigest())
    finally:
        conn.close()
    return found


def storage(db: Path) -> dict:
    """``meta.sqlite`` (with its WAL) against the representation text it
    indexes, and the bytes of each table and index (``dbstat``)."""
    on_disk = sum(p.stat().st_size for p in db.parent.glob("meta.sqlite*"))
    text = 0
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        for (value,) in conn.execute("SELECT text FROM representations WHERE deleted = 0"):
            text += len(unpack(value).encode())
        try:
            tables = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC")
            by_table = {name: round(size / 2**20, 1) for name, size in tables if size > 2**20}
        except sqlite3.OperationalError:  # SQLite built without dbstat
            by_table = {}
    finally:
        conn.close()
    return {
        "text_mib": round(text / 2**20, 1),
        "meta_sqlite_mib": round(on_disk / 2**20, 1),
        "wal_mib": round(sum(p.stat().st_size for p in db.parent.glob("meta.sqlite-wal")) / 2**20, 1),
        "ratio": round(on_disk / text, 2) if text else None,
        "tables_mib": by_table,
    }


def live_chunk_ids(db: Path) -> set[int]:
    rows = query(
        db,
        "SELECT c.chunk_id FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
        "JOIN documents d ON d.doc_id = r.document_id WHERE c.deleted = 0 AND d.deleted = 0",
    )
    return {row[0] for row in rows}


def max_chunk_id(db: Path) -> int:
    return query(db, "SELECT coalesce(max(chunk_id), 0) FROM chunks")[0][0]


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def first_pass(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not any(e["event"] == "lexical_index_complete" for e in server.events):
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise SystemExit("the first pass did not complete")
        time.sleep(0.5)


def clean_build(tree: Path, state: Path, timeout: float) -> dict:
    shutil.rmtree(state, ignore_errors=True)
    began = time.monotonic()
    server = Server(tree, state, environment())
    try:
        first_pass(server, timeout)
        seconds = time.monotonic() - began
        cpu = cpu_seconds(server)
    finally:
        server.stop()
    return {"seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1), "load": load()}


def switch(server: Server, repo: Path, db: Path, branch: str, want: dict[str, str], timeout: float) -> dict:
    """Check ``branch`` out under ``server``; wait until every live document
    has the content hash ``want`` gives it and no job runs."""
    jobs_before, cpu_before = jobs(db), cpu_seconds(server)
    events_before = len(server.events)
    began = time.monotonic()
    git(repo, "checkout", "-q", branch)
    checkout_seconds = time.monotonic() - began
    deadline = began + timeout
    while not (live_hashes(db) == want and running_jobs(db) == 0):
        if time.monotonic() > deadline or server.proc.poll() is not None:
            raise SystemExit(f"the switch to {branch} did not converge")
        time.sleep(0.5)
    seconds = time.monotonic() - began
    cpu = cpu_seconds(server) - cpu_before
    progress = [e["data"] for e in server.events[events_before:] if e["event"] == "scan_progress"]
    return {
        "seconds": round(seconds, 1),
        "checkout_seconds": round(checkout_seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "jobs": jobs(db) - jobs_before,
        "progress_events": len(progress),
        "last_progress": progress[-1] if progress else None,
        "load": load(),
    }


def first_build(server: Server, repo: Path, env: dict, began: float, timeout: float, interval: float) -> dict:
    """``up``'s first pass over 6.12, measured as bench/big_tree.py measures
    a pass: searches once a second, each also sent to an ``up --no-index``
    server on the same state (started once the walk has begun), the files,
    CPU and load every minute, the peak RSS of each process, and once the
    lexical index is complete, ``find`` over the whole tree, the walk's
    coverage and the storage against the text indexed."""
    searcher = Searcher(server.url, interval)
    searcher.start()
    reference: Server | None = None
    peaks: dict[str, float] = {}
    trace: list[dict] = []
    next_trace = began
    deadline = began + timeout
    try:
        while not any(e["event"] == "lexical_index_complete" for e in server.events):
            if time.monotonic() > deadline or server.proc.poll() is not None:
                raise SystemExit("the first pass did not complete")
            if time.monotonic() >= next_trace:
                trace.append(progress(server, began))
                say(json.dumps(trace[-1]))
                next_trace = time.monotonic() + 60.0
            if reference is None and any(e["event"] == "scan_progress" for e in server.events):
                reference = Server(repo, server_state(server), env, "--no-index")
                reference.wait(lambda s: bool(s.url), timeout=120)
                searcher.reference = Mcp(reference.url)
            sample(server, peaks)
            time.sleep(1.0)
        found: dict = {
            "seconds": round(time.monotonic() - began, 1),
            "cpu_seconds": round(cpu_seconds(server), 1),
            "cpu": progress(server, began),
            "load": load(),
            "lexical": next(e["data"] for e in server.events if e["event"] == "lexical_index_complete"),
        }
        searcher.phase = "after"
        client = Mcp(server.url)
        for label, arguments in (
            ("find_literal", {"content": "EXPORT_SYMBOL_GPL(kmalloc", "limit": 50}),
            ("find_regex", {"content": r"static\s+int\s+\w+_probe\(", "regex": True, "limit": 50}),
        ):
            ms, answer = client.timed("dir2mcp.find", arguments)
            found[label] = {"ms": round(ms, 1), "matches": len(answer.get("matches") or [])}
        time.sleep(30)
        searcher.halt.set()
        searcher.join()
        found["search"] = searcher.summary()
        found["coverage"] = next((e["data"] for e in server.events if e["event"] == "coverage"), None)
        sample(server, peaks)
        found["peak_rss_mib"] = {k: round(v, 1) for k, v in peaks.items()}
        found["peak_rss_total_mib"] = round(sum(peaks.values()), 1)
        found["trace"] = trace
    finally:
        searcher.halt.set()
        if reference is not None:
            reference.stop()
    return found


def server_state(server: Server) -> Path:
    args = server.proc.args
    return Path(args[args.index("--state-dir") + 1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "dir2mcp-bench" / "switch")
    parser.add_argument(
        "--subtrees", nargs="+", default=["drivers/net", "fs", "kernel"], help="Paths of both trees, or '.'."
    )
    parser.add_argument("--timeout", type=float, default=7200.0, help="Seconds a step may take.")
    parser.add_argument(
        "--together",
        action="store_true",
        help="Build 6.12 and the 6.1 reference at the same time (compare their CPU, not their wall).",
    )
    parser.add_argument(
        "--search-interval", type=float, default=1.0, help="Seconds between searches during the 6.12 build."
    )
    args = parser.parse_args()
    for version, tarball in TARBALLS.items():
        if not tarball.is_file():
            raise SystemExit(f"{tarball} is missing: apt-get install linux-source-{version}")
    args.work.mkdir(parents=True, exist_ok=True)
    repo = prepare(args.work, args.subtrees)
    print(
        f"# {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {load()}, subtrees {' '.join(args.subtrees)}",
        flush=True,
    )
    result: dict = {"subtrees": args.subtrees, "files": changed_files(repo)}
    print(json.dumps(result["files"]), flush=True)
    clean_tree = args.work / f"{repo.name}-clean-6.1"
    if not clean_tree.is_dir():
        git(repo, "worktree", "add", "-q", "--detach", str(clean_tree), "v6.1")

    # The reference for the switch: a clean build of 6.1 in its own work
    # tree and state directory, after the 6.12 build or (--together) beside it.
    clean_state = args.work / f"state-{repo.name}-clean"

    def reference() -> None:
        result["clean_6.1"] = clean_build(clean_tree, clean_state, args.timeout)
        say(f"clean build of 6.1: {result['clean_6.1']}")

    beside = threading.Thread(target=reference)
    if args.together:
        beside.start()

    # 6.12 first, measured as bench/big_tree.py measures a pass; the server
    # stays up, idle, while the reference is built.
    state = args.work / f"state-{repo.name}"
    shutil.rmtree(state, ignore_errors=True)
    db = state / "meta.sqlite"
    env = environment()
    began = time.monotonic()
    server = Server(repo, state, env)
    try:
        server.wait(lambda s: bool(s.url), timeout=300)
        result["build_6.12"] = first_build(server, repo, env, began, args.timeout, args.search_interval)
        say(f"6.12 built: {json.dumps(result['build_6.12'])}")
        result["storage_6.12"] = storage(db)
        say(f"storage at 6.12: {result['storage_6.12']}")
        print(json.dumps({k: result[k] for k in ("build_6.12", "storage_6.12")}), flush=True)
        want_612, clean_612 = live_hashes(db), unit_hashes(db)

        if not args.together:
            beside.start()
        beside.join()
        if "clean_6.1" not in result:
            raise SystemExit("the clean build of 6.1 did not complete")
        want_61, clean_61 = live_hashes(clean_state / "meta.sqlite"), unit_hashes(clean_state / "meta.sqlite")
        result["storage_clean_6.1"] = storage(clean_state / "meta.sqlite")

        searcher = Searcher(server.url)
        searcher.phase = "before"
        searcher.start()
        time.sleep(30)
        searcher.phase = "during"
        result["switch_to_6.1"] = switch(server, repo, db, "v6.1", want_61, args.timeout)
        say(f"switched to 6.1: {result['switch_to_6.1']}")
        searcher.phase = "after"
        time.sleep(30)
        searcher.halt.set()
        searcher.join()
        result["search"] = searcher.summary()
        result["equal_to_clean_build_6.1"] = compare(unit_hashes(db), clean_61, result)
        say(f"equal to the clean build of 6.1: {result['equal_to_clean_build_6.1']} {result.get('differ')}")
        result["sizes_at_6.1"] = sizes(state)

        live_before, top = live_chunk_ids(db), max_chunk_id(db)
        result["switch_back_to_6.12"] = switch(server, repo, db, "v6.12", want_612, args.timeout)
        say(f"switched back to 6.12: {result['switch_back_to_6.12']}")
        live_after = live_chunk_ids(db)
        result["switch_back_chunks"] = {
            "live": len(live_after),
            "kept": len(live_after & live_before),
            "revived": len({c for c in live_after - live_before if c <= top}),
            "created": len({c for c in live_after if c > top}),
        }
        result["equal_to_first_build_6.12"] = compare(unit_hashes(db), clean_612, result)
        say(f"back, equal to the first build: {result['equal_to_first_build_6.12']}")
        result["sizes_back_at_6.12"] = sizes(state)
        result["storage_back_at_6.12"] = storage(db)
    finally:
        server.stop()
    build, clean = result["build_6.12"], result["clean_6.1"]
    result["ratios"] = {
        "switch_to_6.1 / clean_6.1": ratio(result["switch_to_6.1"], clean),
        "switch_back_to_6.12 / build_6.12": ratio(result["switch_back_to_6.12"], build),
    }
    print(json.dumps(result), flush=True)


def compare(switched: dict[str, tuple[int, str]], clean: dict[str, tuple[int, str]], result: dict) -> bool:
    """Whether the switched index holds the clean build's documents with the
    same chunks; the first paths that differ go into ``result``."""
    if switched == clean:
        return True
    differ = sorted(set(switched) ^ set(clean)) or [p for p in switched if switched[p] != clean.get(p)]
    result.setdefault("differ", []).append(differ[:20])
    return False


def ratio(step: dict, reference: dict) -> dict:
    return {
        "wall": round(step["seconds"] / reference["seconds"], 2),
        "cpu": round(step["cpu_seconds"] / reference["cpu_seconds"], 2),
    }


if __name__ == "__main__":
    main()
