"""Indexing on Celery workers against the embedded default (not a test).

In one run, on the same corpus, times a cold `reindex` three ways:

- the embedded default: one process, SQLite in the state directory (the reference);
- one Celery worker process, PostgreSQL and Redis;
- two Celery worker processes, PostgreSQL and Redis;

first lexical-only (``embed.provider: none``) over a part of the Python
standard library, then with the local embedder over a smaller part, where
the embedding work is what workers share. It also reports the CPU time the
whole machine spent during each run (server, workers, PostgreSQL, Redis:
the work a setup costs, wherever it ran) and what the corpus added to the
PostgreSQL database (its size less the empty migrated schema's), per
100k chunks. Needs the machine's PostgreSQL and Redis
(`bash .ci/services`). Record the figures in docs/benchmarks.md.

    python bench/scaleout.py [--files 400] [--embed-files 60] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
PG = "postgres://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/13"


def base_env(embed: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DIR2MCP_", "MISTRAL", "DJANGO_"))}
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)
    env["DIR2MCP_EMBED__PROVIDER"] = embed
    return env


def stdlib_part(dest: Path, files: int) -> None:
    """The first ``files`` modules of the standard library (868 without its
    tests), then of the installed packages (pinned by requirements.txt)."""
    picked: list[tuple[Path, Path]] = []
    for key, prefix in (("stdlib", "stdlib"), ("purelib", "site-packages")):
        src = Path(sysconfig.get_paths()[key])
        for path in sorted(src.rglob("*.py")):
            parts = path.relative_to(src).parts
            if "site-packages" in parts or any(p in ("test", "tests") for p in parts):
                continue
            picked.append((path, Path(prefix) / path.relative_to(src)))
    for path, rel in picked[:files]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


def busy_cpu() -> float:
    """CPU seconds the machine has spent not idle since boot (Linux), or 0."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def reindex(root: Path, env: dict[str, str]) -> tuple[float, float, dict]:
    """Seconds taken, the machine's busy CPU seconds meanwhile, and `status`."""
    start, cpu = time.perf_counter(), busy_cpu()
    subprocess.run(
        [sys.executable, "manage.py", "reindex", "--dir", str(root), "--quiet"],
        cwd=REPO, env=env, check=True, capture_output=True,
    )  # fmt: skip
    elapsed, cpu = time.perf_counter() - start, busy_cpu() - cpu
    status = subprocess.run(
        [sys.executable, "manage.py", "status", "--dir", str(root), "--json"],
        cwd=REPO, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return elapsed, cpu, json.loads(status.stdout)


@contextlib.contextmanager
def database():
    name = f"dir2mcp_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG}/{name}"
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_workers(count: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen]:
    procs = []
    for i in range(count):
        log = logs / f"w{i}.log"
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "dir2mcp_site",
                    "worker",
                    "-c",
                    "1",
                    "-n",
                    f"w{i}@%h",
                    "-Q",
                    env["DIR2MCP_CELERY_QUEUE"],
                    "--without-mingle",
                    "--without-gossip",
                    "--loglevel=INFO",
                ],
                cwd=REPO,
                env=env,
                stdout=log.open("w"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        )
    try:
        for i, proc in enumerate(procs):
            while " ready." not in (logs / f"w{i}.log").read_text():
                if proc.poll() is not None:
                    raise SystemExit((logs / f"w{i}.log").read_text()[-2000:])
                time.sleep(0.2)
        settle(procs)
    except BaseException:  # one failed or the run was interrupted: none is left behind
        stop_workers(procs)
        raise
    return procs


def settle(procs: list[subprocess.Popen]) -> None:
    """Wait until the workers are idle: " ready." comes before each pool
    process has loaded its runtime (the local model, too), and that start
    is not indexing work."""
    before = -1.0
    for _ in range(300):
        now = sum(tree_cpu(proc.pid) for proc in procs)
        if now - before < 0.02:
            return
        before = now
        time.sleep(0.3)


def tree_cpu(pid: int) -> float:
    """CPU seconds used by a process and its descendants (Linux; else 0)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            kids = [int(child) for child in children.read().split()]
    except OSError:
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return own + sum(tree_cpu(kid) for kid in kids)


def stop_workers(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        proc.wait(60)


def on_workers(
    tree: Path, embed: str, workers: int, work: Path, run: int = 0
) -> tuple[float, float, dict, int]:
    root = work / f"w{workers}-{embed}-{run}" / "root"
    shutil.copytree(tree, root)
    with database() as db:
        env = base_env(embed) | {
            "DIR2MCP_ROOT": str(root),
            "DATABASE_URL": db,
            "CELERY_BROKER_URL": REDIS,
            "DIR2MCP_CELERY_QUEUE": f"bench-{uuid.uuid4().hex[:8]}",
        }
        # Create the schema first, so the workers start on a migrated database.
        subprocess.run(
            [sys.executable, "manage.py", "status", "--dir", str(root)],
            cwd=REPO,
            env=env,
            capture_output=True,
        )
        empty = database_size(db)  # the migrated schema, before any document
        procs = start_workers(workers, env, root.parent)
        try:
            elapsed, cpu, status = reindex(root, env)
        finally:
            stop_workers(procs)
        size = database_size(db) - empty
    return elapsed, cpu, status, size


def database_size(db: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        conn.execute("VACUUM ANALYZE")
        return conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]


def embedded(tree: Path, embed: str, work: Path, run: int) -> tuple[float, float, dict]:
    root = work / f"embedded-{embed}-{run}" / "root"
    shutil.copytree(tree, root)
    return reindex(root, base_env(embed))


def scenario(label: str, tree: Path, embed: str, work: Path, repeat: int) -> list[dict]:
    """Each setup ``repeat`` times, interleaved (default, 1, 2 workers, then
    again), so drift in the machine's load touches all three alike; the
    median is reported, with the spread."""
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    sizes: dict[str, float] = {}
    ref = None
    for run in range(repeat):
        elapsed, busy, ref = embedded(tree, embed, work, run)
        times.setdefault("embedded default (1 process, SQLite)", []).append(elapsed)
        cpu.setdefault("embedded default (1 process, SQLite)", []).append(busy)
        for workers in (1, 2):
            elapsed, busy, status, size = on_workers(tree, embed, workers, work, run)
            same = status["chunks"] == ref["chunks"] and status["documents"] == ref["documents"]
            assert same, (status, ref)
            setup = f"{workers} Celery worker{'s' if workers > 1 else ''} (PostgreSQL, Redis)"
            times.setdefault(setup, []).append(elapsed)
            cpu.setdefault(setup, []).append(busy)
            sizes[setup] = size / 2**20 * 100_000 / max(ref["chunks"], 1)
    assert ref is not None
    chunks = ref["chunks"]
    ref_time = statistics.median(times["embedded default (1 process, SQLite)"])
    print(f"\n{label}: {ref['documents']} documents, {chunks} chunks, median of {repeat} runs")
    print(
        f"{'setup':44} {'seconds':>8} {'range':>11} {'chunks/s':>9} {'vs default':>10} "
        f"{'CPU s':>6} {'PG MB/100k':>11}"
    )
    rows = []
    for setup, runs in times.items():
        median = statistics.median(runs)
        size = f"{sizes[setup]:.0f}" if setup in sizes else "-"
        spread = f"{min(runs):.1f}-{max(runs):.1f}"
        rate, ratio = chunks / median, ref_time / median
        busy = statistics.median(cpu[setup])
        print(f"{setup:44} {median:8.1f} {spread:>11} {rate:9.1f} {ratio:9.2f}x {busy:6.1f} {size:>11}")
        rows.append({"setup": setup, "seconds": median, "runs": runs, "chunks": chunks, "cpu": busy})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--files", type=int, default=400, help="standard-library files for the lexical run")
    parser.add_argument(
        "--embed-files", type=int, default=60, help="files for the run with the local embedder"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each setup (the median is reported)")
    args = parser.parse_args()
    cpu = platform.processor() or platform.machine()
    print(f"machine: {cpu}, {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.files:  # 0 skips a scenario
            lexical = work / "stdlib"
            stdlib_part(lexical, args.files)
            scenario("lexical only, Python modules", lexical, "none", work, args.repeat)
        if args.embed_files:
            embedded_part = work / "stdlib-embedded"
            stdlib_part(embedded_part, args.embed_files)
            scenario("local embedder, Python modules", embedded_part, "local", work, args.repeat)


if __name__ == "__main__":
    main()
