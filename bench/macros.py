"""C macros as definitions, generated files without names: the symbol index
before and after, on a tree of C (issue #37; a benchmark, not a test).

Indexes the same tree (``--tree``, e.g. the kernel's ``drivers/gpu/drm/amd``
and ``kernel/`` copied under one folder) twice in one run, each in its own
process and state directory with ``embed.provider: none``: once with the
code of ``--base`` (a checkout of the commit before the change, e.g.
``git archive`` of it) and once with this checkout's. For each it prints, as
JSON: the indexing process's CPU seconds (``time.process_time`` of the
indexing pass, which other load on the machine does not inflate as it does
wall time), symbol and reference rows (uses too) split by folder, the bytes
of the two tables and their indexes (``dbstat``), ``meta.sqlite`` vacuumed,
and the bytes of file text indexed; then the ratios after/before. On each
state, with its own code, it also times ``symbols`` and ``references`` for
a few names (CPU milliseconds, best of three), register names among them,
which ``symbols`` now finds in the generated headers through the full-text
index.

    python bench/macros.py --tree TREE --base DIR [--work DIR] [--names a,b,c]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: folders whose rows are counted apart (prefixes of rel_path)
GROUPS = ("drivers/gpu/drm/amd/include/", "drivers/gpu/drm/amd/", "kernel/")
NAMES = "regGRBM_STATUS,mmGRBM_STATUS,WREG32,amdgpu_device_rreg,schedule,list_for_each_entry,PAGE_SIZE"


def phase_index(code: Path, tree: Path, state: Path, config: Path) -> dict:
    """Index ``tree`` with the code of ``code`` (run in a child process)."""
    # The project's modules load from the checkout sys.path names first.
    sys.path.insert(0, str(code))
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(tree), "--state-dir", str(state)])
    import django

    django.setup()
    from corpus.ingest.pipeline import Indexer
    from corpus.store import migrate
    from kernel.config import load_config
    from kernel.state import StateDir

    state_dir = StateDir(state)
    state_dir.ensure()
    migrate(state_dir)
    cpu, wall = time.process_time(), time.perf_counter()
    counters = Indexer(tree, state_dir, load_config(config)).run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return {
        "code": str(Path(sys.modules["corpus"].__file__).parent.parent),
        "indexed": counters.indexed,
        "cpu_s": round(cpu, 1),
        "children_cpu_s": round(sum(os.times()[2:4]), 1),
        "wall_s": round(wall, 1),
    }


def phase_query(code: Path, tree: Path, state: Path, names: list[str]) -> dict:
    sys.path.insert(0, str(code))
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(tree), "--state-dir", str(state)])
    import django

    django.setup()
    from corpus.navigation import names as navigation

    out = {}
    for name in names:
        best: dict[str, float] = {}
        found: dict[str, object] = {}
        for _ in range(3):
            calls = (("symbols", navigation.find_symbols), ("references", navigation.find_references))
            for tool, call in calls:
                start = time.process_time()
                result = call(name)
                best[tool] = min(best.get(tool, 1e9), (time.process_time() - start) * 1000)
                hits = result.get(tool) or []
                found[tool] = len(hits)
                if tool == "symbols" and hits:
                    first = hits[0]
                    found["first"] = f"{first['rel_path']}:{first['line']} {first['kind']} {first['match']}"
        out[name] = {f"{tool}_cpu_ms": round(ms, 1) for tool, ms in best.items()} | found
    return out


def measure(db: Path) -> dict:
    """Rows and bytes of one state's database (read after the indexer is gone)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows: dict[str, dict[str, int]] = {}
        for label, table in (("symbols", "symbols"), ("references", "symbol_references")):
            for group in (*GROUPS, ""):
                # The first group that holds a path counts it: the folders nest.
                earlier = [g for g in GROUPS[: GROUPS.index(group)]] if group else list(GROUPS)
                where = "d.rel_path LIKE ? || '%'" if group else "1"
                params = [group] if group else []
                for g in earlier:
                    where += " AND d.rel_path NOT LIKE ? || '%'"
                    params.append(g)
                count = conn.execute(
                    f"SELECT COUNT(*) FROM {table} t JOIN documents d ON d.doc_id = t.document_id "
                    f"WHERE {where}",
                    params,
                ).fetchone()[0]
                rows.setdefault(label, {})[group or "other"] = count
            rows[label]["total"] = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        uses = conn.execute(
            "SELECT COALESCE(SUM(LENGTH(lines) - LENGTH(REPLACE(lines, ' ', '')) + 1), 0) "
            "FROM symbol_references"
        ).fetchone()[0]
        tables = dict(
            conn.execute(
                "SELECT name, SUM(pgsize) FROM dbstat WHERE name IN "
                "('symbols', 'symbol_references', 'symbol_name_lower', 'symbol_doc', 'reference_name', "
                "'reference_doc') GROUP BY name"
            ).fetchall()
        )
        live = "SELECT COALESCE(SUM(size_bytes), 0) FROM documents WHERE deleted = 0"
        text = conn.execute(live).fetchone()[0]
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
    return {
        "rows": rows,
        "uses": uses,
        "navigation_bytes": sum(tables.values()),
        "table_bytes": tables,
        "file_bytes": text,
        "db_vacuumed_bytes": db.stat().st_size,
    }


def child(phase: str, code: Path, args: list[str]) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), phase, "--code", str(code), *args]
    done = subprocess.run(command, cwd=code, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{phase} with {code} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", nargs="?", default="run", choices=("run", "_index", "_query"))
    parser.add_argument("--tree", type=Path, required=True, help="the tree of C to index")
    parser.add_argument("--base", type=Path, help="a checkout of the code before the change")
    parser.add_argument("--code", type=Path, default=REPO, help="(child phases) the checkout to run")
    parser.add_argument("--state", type=Path, help="(child phases) the state directory")
    parser.add_argument("--config", type=Path, help="(child phases) the config file")
    parser.add_argument("--work", type=Path, help="where the state directories go (a temporary folder)")
    parser.add_argument("--names", default=NAMES, help="names to time symbols and references for")
    args = parser.parse_args()
    if args.phase == "_index":
        print(json.dumps(phase_index(args.code, args.tree, args.state, args.config)))
        return
    if args.phase == "_query":
        print(json.dumps(phase_query(args.code, args.tree, args.state, args.names.split(","))))
        return
    if args.base is None:
        raise SystemExit("--base (a checkout of the code before the change) is required")
    work = args.work or Path(tempfile.mkdtemp(prefix="dir2mcp-macros-"))
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.yaml"
    config.write_text("embed:\n  provider: none\n")
    load = [os.getloadavg()]
    report: dict = {
        "machine": {"nproc": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version()},
        "tree": str(args.tree),
    }
    for label, code in (("before", args.base.resolve()), ("after", REPO)):
        state = work / f"state-{label}"
        shutil.rmtree(state, ignore_errors=True)
        indexed = child(
            "_index", code, ["--tree", str(args.tree), "--state", str(state), "--config", str(config)]
        )
        load.append(os.getloadavg())
        report[label] = indexed | measure(state / "meta.sqlite")
        print(json.dumps({label: report[label]}), file=sys.stderr)
    before, after = report["before"], report["after"]
    report["ratios"] = {
        key: round(after[key] / before[key], 3) if before[key] else None
        for key in ("cpu_s", "navigation_bytes", "db_vacuumed_bytes", "uses")
    } | {
        f"{label}_rows": round(after["rows"][label]["total"] / max(before["rows"][label]["total"], 1), 3)
        for label in ("symbols", "references")
    }
    report["queries"] = {
        label: child(
            "_query",
            code,
            ["--tree", str(args.tree), "--state", str(work / f"state-{label}"), "--names", args.names],
        )
        for label, code in (("before", args.base.resolve()), ("after", REPO))
    }
    report["load"] = [round(sample[0], 1) for sample in load]
    print(json.dumps(report, indent=1))


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
