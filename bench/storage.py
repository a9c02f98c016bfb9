"""What ``meta.sqlite`` spends its bytes on, and what two ways of storing
each text once would save (issue #37 item 5; a benchmark, not a test).

Reads a state directory built by ``manage.py reindex`` and prints, as JSON:
the bytes of representation text indexed, the database's size as it is and
after ``VACUUM``, the bytes of each table and index (``dbstat``), and the
vacuumed size of two copies changed the way each option would store them:

- ``offsets``: chunks hold no text of their own (two integers into their
  representation's text instead);
- ``zlib``: chunk and representation texts stored zlib-compressed (what
  corpus/packed.py does; on a database that already packs them, only the
  rows left as text change).

    python bench/storage.py --state S

With ``--search ROOT``, it instead times searches over that state (lexical,
``embed.provider: none``) and prints the CPU time per query (p50, p90;
``time.process_time``, which the machine's other load does not inflate as
it does wall time). ``--code DIR`` runs another checkout's code on its own
state (main's on main's), so two layouts are compared in one session:

    python bench/storage.py --state S --search ROOT [--code DIR]

With ``--navigation ROOT`` it times ``dir2mcp.symbols`` and
``dir2mcp.references`` the same way (the first page of 50, and every page
of a name's uses through the cursor), with a digest of their answers.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import sqlite3
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def vacuumed_size(db: Path) -> int:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute("VACUUM")
    return db.stat().st_size


def by_table(db: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    return {name: size for name, size in rows}


def variant(db: Path, work: Path, name: str, change) -> int:
    copy = work / f"{name}.sqlite"
    shutil.copyfile(db, copy)
    with contextlib.closing(sqlite3.connect(copy)) as conn:
        change(conn)
        conn.commit()
    return vacuumed_size(copy)


def no_chunk_text(conn: sqlite3.Connection) -> None:
    # Two integers the size of a typical offset and length stand in for the
    # text (on a database from before migration 0016; after it, only the
    # chunks that are not slices still hold a text).
    columns = {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}
    if "text_start" not in columns:
        conn.execute("ALTER TABLE chunks ADD COLUMN text_start integer")
        conn.execute("ALTER TABLE chunks ADD COLUMN text_end integer")
    conn.execute(
        "UPDATE chunks SET text = '', text_start = 123456, text_end = 124456 WHERE text_start IS NULL"
    )


def compressed(conn: sqlite3.Connection) -> None:
    conn.create_function(
        "zpack", 1, lambda s: zlib.compress(s.encode(), 6) if isinstance(s, str) and s else s
    )
    conn.execute("UPDATE chunks SET text = zpack(text)")
    conn.execute("UPDATE representations SET text = zpack(text)")


def interned_references(conn: sqlite3.Connection) -> None:
    # Names in a table of their own; references clustered on (name, document)
    # (migration 0023 interned them, clustered on (document, name): nothing to do after it).
    if "name_id" in {row[1] for row in conn.execute("PRAGMA table_info(symbol_references)")}:
        return
    conn.executescript(
        """
        CREATE TABLE names (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
        INSERT INTO names (name) SELECT DISTINCT name FROM symbol_references;
        CREATE TABLE refs (name_id INTEGER NOT NULL, document_id INTEGER NOT NULL, lines TEXT NOT NULL,
            PRIMARY KEY (name_id, document_id)) WITHOUT ROWID;
        INSERT INTO refs SELECT n.id, r.document_id, r.lines FROM symbol_references r
            JOIN names n ON n.name = r.name;
        CREATE INDEX refs_doc ON refs (document_id);
        DROP TABLE symbol_references;
        """
    )


def without_text_hash(conn: sqlite3.Connection) -> None:
    # (migration 0017 dropped it: nothing to do after it)
    if "text_hash" in {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}:
        conn.execute("ALTER TABLE chunks DROP COLUMN text_hash")


#: queries over the kernel subset: identifiers, words, and a mix
QUERIES = (
    "schedule",
    "kmalloc",
    "ext4_map_blocks",
    "spin_lock_irqsave",
    "page fault handling",
    "rcu read lock",
    "mutex_unlock",
    "copy_from_user",
    "workqueue",
    "ext4 journal commit",
    "cgroup migrate task",
    "memory cgroup charge",
    "printk ratelimit",
    "kthread_create_on_node",
    "hrtimer start range",
    "vma merge",
    "swap entry",
    "inode lock",
    "bpf verifier check",
    "GC_9_0 register offset",
    "wake up process",
    "folio_mark_dirty",
    "audit log",
    "signal pending",
    "extent tree",
    "clock event device",
    "irq domain",
    "tracepoint probe",
    "slab cache create",
    "futex wait",
)


def time_searches(state_dir: Path, root: Path, rounds: int) -> dict:
    """CPU ms per lexical search over ``state_dir`` (p50, p90), after one warm-up round."""
    # Django and the project's modules load after sys.path names the checkout.
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(root), "--state-dir", str(state_dir)])
    import django

    django.setup()
    from corpus.retrieval import Searcher
    from corpus.store import open_store
    from kernel.config import build_config
    from kernel.state import StateDir

    state = StateDir(state_dir)
    open_store(state)
    searcher = Searcher(state, build_config({"embed": {"provider": "none"}}, {}, {}), None)
    answers = hashlib.sha256()
    for query in QUERIES:
        for hit in searcher.search(query, k=10).hits:
            answers.update(f"{query}\0{hit.rel_path}\0{hit.span}\0{hit.text}\0".encode())
    cpu, wall = [], []
    for _ in range(rounds):
        for query in QUERIES:
            c, w = time.process_time(), time.perf_counter()
            searcher.search(query, k=10)
            cpu.append((time.process_time() - c) * 1000)
            wall.append((time.perf_counter() - w) * 1000)
    cpu.sort()
    wall.sort()
    return {
        "code": str(Path(sys.modules["corpus"].__file__).parent.parent),
        "queries": len(cpu),
        "cpu_p50_ms": round(cpu[len(cpu) // 2], 2),
        "cpu_p90_ms": round(cpu[len(cpu) * 9 // 10], 2),
        "cpu_p99_ms": round(cpu[min(len(cpu) - 1, len(cpu) * 99 // 100)], 2),
        "cpu_mean_ms": round(sum(cpu) / len(cpu), 2),
        "wall_p50_ms": round(wall[len(wall) // 2], 2),
        # equal digests: the same hits, spans and texts for every query
        "answers_sha256": answers.hexdigest()[:16],
    }


#: names over the kernel's fs/ (and the rest of it): common to rare
NAMES = (
    "kfree",
    "kmalloc",
    "mutex_lock",
    "spin_lock",
    "inode_lock",
    "iput",
    "brelse",
    "d_inode",
    "copy_from_user",
    "folio_mark_dirty",
    "ext4_map_blocks",
    "btrfs_search_slot",
    "xfs_trans_commit",
    "nfs_fattr",
    "fuse_conn",
    "ENOMEM",
    "EXPORT_SYMBOL",
    "super_block",
    "dentry",
    "zstd_decompress",
)


def _timed(rounds: int, call) -> tuple[list[float], list[float]]:
    cpu, wall = [], []
    for _ in range(rounds):
        for name in NAMES:
            c, w = time.process_time(), time.perf_counter()
            call(name)
            cpu.append((time.process_time() - c) * 1000)
            wall.append((time.perf_counter() - w) * 1000)
    return sorted(cpu), sorted(wall)


def time_navigation(state_dir: Path, root: Path, rounds: int) -> dict:
    """CPU ms per ``find_symbols`` and ``find_references`` call (p50, p90), after a warm-up round."""
    # Django and the project's modules load after sys.path names the checkout.
    from dir2mcp_site import bootstrap

    bootstrap.prepare(["--dir", str(root), "--state-dir", str(state_dir)])
    import django

    django.setup()
    from corpus.navigation import names
    from corpus.store import open_store
    from kernel.state import StateDir

    open_store(StateDir(state_dir))

    def every_use(name: str) -> list:
        hits, cursor = [], None
        while True:
            page = names.find_references(name, limit=50, cursor=cursor)
            hits += page["references"]
            cursor = page.get("next_cursor")
            if not cursor:
                return hits

    calls = {
        "symbols": lambda name: names.find_symbols(name, limit=20),
        "references_first_page": lambda name: names.find_references(name, limit=50),
        "references_every_page": every_use,
    }
    report: dict = {"code": str(Path(sys.modules["corpus"].__file__).parent.parent)}
    for label, call in calls.items():
        answers = hashlib.sha256()
        count = 0
        for name in NAMES:
            found = call(name)
            items = found if isinstance(found, list) else found.get("symbols", found.get("references"))
            count += len(items)
            answers.update(json.dumps(items, sort_keys=True).encode())
        cpu, wall = _timed(rounds, call)
        report[label] = {
            "calls": len(cpu),
            "items": count,
            "cpu_p50_ms": round(cpu[len(cpu) // 2], 2),
            "cpu_p90_ms": round(cpu[len(cpu) * 9 // 10], 2),
            "cpu_mean_ms": round(sum(cpu) / len(cpu), 2),
            "wall_p50_ms": round(wall[len(wall) // 2], 2),
            # equal digests: the same hits, in the same order
            "answers_sha256": answers.hexdigest()[:16],
        }
    return report


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--search", type=Path, help="time searches over the state; its root folder")
    parser.add_argument("--navigation", type=Path, help="time symbols and references; the root folder")
    parser.add_argument("--code", type=Path, help="the checkout whose code runs the searches")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(args.code or REPO))
    if args.navigation:
        print(json.dumps(time_navigation(args.state, args.navigation, args.rounds), indent=1))
        return
    if args.search:
        print(json.dumps(time_searches(args.state, args.search, args.rounds), indent=1))
        return
    # imported once sys.path names the checkout
    from corpus.packed import unpack

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        db = work / "meta.sqlite"
        with contextlib.closing(sqlite3.connect(args.state / "meta.sqlite")) as source:
            source.execute(f"VACUUM INTO '{db}'")
            texts = source.execute("SELECT text FROM representations WHERE NOT deleted").fetchall()
            text = (sum(len(unpack(value).encode()) for (value,) in texts), len(texts))
            chunks = source.execute("SELECT count(*) FROM chunks WHERE NOT deleted").fetchone()[0]
        on_disk = sum(p.stat().st_size for p in args.state.glob("meta.sqlite*"))
        vacuumed = db.stat().st_size
        report = {
            "text_bytes": text[0],
            "representations": text[1],
            "chunks": chunks,
            "meta_sqlite_bytes": on_disk,
            "vacuumed_bytes": vacuumed,
            "ratio": round(on_disk / text[0], 2),
            "vacuumed_ratio": round(vacuumed / text[0], 2),
            "tables_mib": {k: round(v / 2**20, 2) for k, v in by_table(db).items() if v > 2**16},
        }
        variants = (
            ("offsets", no_chunk_text),
            ("zlib", compressed),
            ("references", interned_references),
            ("text_hash", without_text_hash),
        )
        for name, change in variants:
            size = variant(db, work, name, change)
            report[f"{name}_vacuumed_ratio"] = round(size / text[0], 2)
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
