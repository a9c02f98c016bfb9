"""Ingestion on real Celery worker processes, with Redis and PostgreSQL.

Each test gets its own PostgreSQL database and Celery queue on the
machine's servers (`.ci/services` starts them). The reference is the
embedded default: `reindex` in one process into the state directory's
SQLite. Workers embed with the local model, so tasks last long enough for
a SIGKILL to land inside one. `up` with the broker set runs its indexing
child as the coordinator, and serves what the workers store.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from corpus.index.lexical_pg import stem, tsquery
from corpus.index.words import index_text, query_terms, tokens
from tests.support import CHUNK_TEXT, chunk_text, wait_until
from tests.test_cli import REPO, base_env, cli
from tests.test_crash import write_tree
from tests.up_process import ASKING_EVERY

# Its own waits allow 300-600 s each for a loaded machine; the suite's 300 s
# default, not the code, failed its tests there (the module fixture alone
# can take most of it).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REDIS = "redis://127.0.0.1:6379/14"
EMBED = {"DIR2MCP_EMBED__PROVIDER": "local"}


@pytest.fixture
def database(pg_database):
    return pg_database


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    write_tree(root)
    return root


@pytest.fixture(scope="module")
def reference(tree, tmp_path_factory) -> dict:
    """The embedded single-process build of the tree (SQLite)."""
    root = tmp_path_factory.mktemp("reference") / "root"
    shutil.copytree(tree, root)
    done = cli("reindex", "--dir", str(root), env=EMBED, timeout=600)
    assert done.returncode == 0, done.stderr
    state = root / ".dir2mcp"
    with contextlib.closing(sqlite3.connect(state / "meta.sqlite")) as conn:
        view = snapshot(conn)
    return {"view": view, "top": top_hits(root, {}), "status": status(root, {})}


class Workers:
    """Celery worker processes for one test, each in its own process group."""

    def __init__(self, env: dict[str, str], logs: Path):
        self.env, self.logs, self.procs, self.files = env, logs, {}, []

    def start(self, name: str) -> None:
        log = self.logs / f"{name}.log"
        self.files.append(out := log.open("w"))
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "dir2mcp_site", "worker", "-c", "1",
             "-n", f"{name}@%h", "-Q", self.env["DIR2MCP_CELERY_QUEUE"],
             "--without-mingle", "--without-gossip", "--loglevel=INFO"],
            cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

        # The main process's "ready." and each pool process's (store open,
        # embedder loaded): then the worker's start-up connections are made.
        def started() -> bool:
            assert self.procs[name].poll() is None, log.read_text()[-3000:]
            text = log.read_text()
            return " ready." in text and "pool process ready" in text

        wait_until(
            started,
            timeout=60,
            interval=0.2,
            message=lambda: f"worker {name} to start: {log.read_text()[-3000:]}",
        )

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait(30)

    def stop(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        for out in self.files:
            out.close()


TASK_PATHS = 8


def scaleout_env(root: Path, database: str) -> dict[str, str]:
    env = base_env()
    env.update(EMBED)
    env.update(
        {
            "DIR2MCP_ROOT": str(root),
            "DATABASE_URL": database,
            "CELERY_BROKER_URL": REDIS,
            "DIR2MCP_CELERY_QUEUE": f"dir2mcp-test-{uuid.uuid4().hex[:8]}",
            # A dead worker's task comes back after 10 s, not the default hour.
            "DIR2MCP_CELERY_VISIBILITY_TIMEOUT": "10",
            # Several tasks per worker from this small tree, as a large one has.
            "DIR2MCP_CELERY_TASK_PATHS": str(TASK_PATHS),
        }
    )
    return env


@pytest.fixture
def scaleout(tree, database, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(tree, root)
    env = scaleout_env(root, database)
    workers = Workers(env, tmp_path)
    yield root, env, workers
    workers.stop()


def snapshot(conn) -> dict:
    """Documents, representations, chunks, spans, symbols and references by path and position."""
    live = "c.deleted = false AND r.deleted = false AND d.deleted = false"
    joins = (
        "FROM chunks c JOIN representations r ON r.rep_id = c.representation_id "
        "JOIN documents d ON d.doc_id = r.document_id"
    )

    def rows(sql: str) -> list[tuple]:
        return sorted(tuple(row) for row in conn.execute(sql).fetchall())

    return {
        "documents": rows(
            "SELECT rel_path, doc_type, content_hash, status, size_bytes FROM documents WHERE deleted = false"
        ),
        "duplicates": rows("SELECT rel_path FROM documents GROUP BY rel_path HAVING count(*) > 1"),
        "representations": rows(
            "SELECT d.rel_path, r.rep_type, r.rep_hash FROM representations r "
            "JOIN documents d ON d.doc_id = r.document_id WHERE r.deleted = false AND d.deleted = false"
        ),
        "chunks": rows(
            "SELECT d.rel_path, r.rep_type, c.ordinal, c.text, c.text_start, c.text_end, c.index_kind "
            f"{joins} WHERE {live}"
        ),
        "spans": rows(
            f'SELECT d.rel_path, c.ordinal, s.span_kind, s.start, s."end" {joins} '
            f"JOIN spans s ON s.chunk_id = c.chunk_id WHERE {live}"
        ),
        "unembedded": rows(f"SELECT c.chunk_id {joins} WHERE {live} AND c.embedding_status != 'ok'"),
        # The symbol index rides with the chunks through the workers (issue #32).
        "symbols": rows(
            'SELECT d.rel_path, s.name, s.kind, s.line, s.start, s."end", s.enclosing FROM symbols s '
            "JOIN documents d ON d.doc_id = s.document_id WHERE d.deleted = false"
        ),
        "references": rows(
            "SELECT d.rel_path, n.name, x.lines FROM symbol_references x "
            "JOIN symbol_names n ON n.id = x.name_id "
            "JOIN documents d ON d.doc_id = x.document_id WHERE d.deleted = false"
        ),
    }


def queries(root: Path) -> list[str]:
    """Identifiers that stand in the tree, one file each.

    Only queries every word of which some chunk holds: where none does,
    the ranking of partial matches is each backend's own (BM25 on SQLite,
    ts_rank on PostgreSQL; corpus/index/lexical_pg.py)."""
    names = sorted(re.findall(r"def (\w+)\(", "".join(p.read_text() for p in sorted(root.rglob("*.py")))))
    return names[::17]


#: `ask --mode search_only --json` once per query, all in one process: a
#: process per query started Django and loaded the local model each time,
#: about a fifth of this file's CPU. The last line printed is the answers.
ASK_EACH = """
import io, json
from django.core.management import call_command
answers = []
for query in {queries!r}:
    out = io.StringIO()
    call_command("ask", query, "--dir", {root!r}, "--mode", "search_only", "--json", stdout=out)
    answers.append(json.loads(out.getvalue()))
print(json.dumps(answers))
"""


def top_hits(root: Path, env: dict) -> dict[str, tuple]:
    """The first hit (path and span) of each query, through `ask`."""
    asked = queries(root)
    done = cli(
        "shell", "--no-imports", "-c", ASK_EACH.format(root=str(root), queries=asked),
        env={**EMBED, **env, "DIR2MCP_ROOT": str(root)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout.splitlines()[-1])
    assert len(answers) == len(asked) > 5
    out = {}
    for query, answer in zip(asked, answers, strict=True):
        first = answer["citations"][0]
        out[query] = (first["rel_path"], json.dumps(first["span"], sort_keys=True))
    return out


def sessions(database: str) -> int:
    """Connections ever opened to this database."""
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[0]


def announced(database: str, names: set[str]) -> None:
    """Wait until these workers' rows are in the workers table."""
    seen: set[str] = set()

    def listed() -> bool:
        with psycopg.connect(database) as conn:
            seen.update(row[0].split("@")[0] for row in conn.execute("SELECT name FROM workers").fetchall())
        return names <= seen

    wait_until(listed, timeout=30, interval=0.2, message=lambda: f"workers {names} to be announced: {seen}")


def status(root: Path, env: dict) -> dict:
    done = cli("status", "--dir", str(root), "--json", env={**EMBED, **env})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


COUNTERS = ("indexed", "skipped", "errors", "representations", "chunks_total", "embedded_ok", "deleted")


def job_counters(report: dict) -> dict[str, int]:
    return {name: report["indexing"][name] for name in COUNTERS}


def test_two_workers_into_postgres_build_what_one_process_builds(scaleout, database, reference):
    root, env, workers = scaleout
    workers.start("w1")
    workers.start("w2")
    # A worker's main process announces itself on its own connection, at
    # about the time its log says "ready": count from after both did.
    announced(database, {"w1", "w2"})

    opened = sessions(database)
    done = cli("reindex", "--dir", str(root), env=env, timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Waiting for Celery workers" in done.stdout
    opened = sessions(database) - opened

    with psycopg.connect(database) as conn:
        view = snapshot(conn)
        lexical = conn.execute("SELECT count(*) FROM chunks_lexical").fetchone()[0]
        by_worker = dict(
            conn.execute("SELECT worker, count(*) FROM index_job_items GROUP BY worker").fetchall()
        )
    assert view == reference["view"] and view["unembedded"] == [] and view["duplicates"] == []
    assert view["symbols"] and view["references"]
    assert lexical == len(view["chunks"])
    assert set(by_worker) == {f"w1@{os.uname().nodename}", f"w2@{os.uname().nodename}"}, by_worker

    report = status(root, env)
    assert job_counters(report) == job_counters(reference["status"])
    assert report["indexing"]["outcome"] == "complete"
    celery = report["celery"]
    assert celery["queued_messages"] == 0 and celery["files_waiting"] == 0
    assert {w["name"].split("@")[0] for w in celery["workers"]} == {"w1", "w2"}
    tasks = sum(w["tasks_done"] for w in celery["workers"])
    assert tasks >= len(view["documents"]) // TASK_PATHS
    assert "redis://127.0.0.1:6379/14" == celery["broker"]
    # Workers keep their connection from task to task (corpus/tasks.py):
    # the coordinator's, its index lock's (corpus/ingest/lock.py) and one
    # per worker, not one per task.
    assert opened <= 5 < tasks, (opened, tasks)

    assert top_hits(root, env) == reference["top"]

    # Connections cut under the workers (a database restart): the next
    # tasks connect again and finish.
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid != pg_backend_pid()"
        )
    (root / "after_restart.md").write_text("The zanzibarword arrived after the restart.\n")
    again = cli("reindex", "--dir", str(root), env=env, timeout=600)
    assert again.returncode == 0, again.stderr + again.stdout
    hit = cli("ask", "zanzibarword", "--dir", str(root), "--mode", "search_only", "--json", env=env)
    assert json.loads(hit.stdout)["citations"][0]["rel_path"] == "after_restart.md", hit.stdout
    assert status(root, env)["indexing"]["errors"] == 0


def test_a_worker_killed_mid_task_loses_and_duplicates_nothing(scaleout, database, reference):
    root, env, workers = scaleout
    workers.start("w1")
    workers.start("w2")
    coordinator = subprocess.Popen(
        [sys.executable, str(REPO / "manage.py"), "reindex", "--dir", str(root)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Wait until w1 has written a batch and is embedding it: mid-task.
        def held_by_w1() -> str | None:
            assert coordinator.poll() is None, "the run ended before w1 was caught mid-task"
            with psycopg.connect(database) as conn:
                row = conn.execute(
                    "SELECT rel_path FROM index_job_items "
                    "WHERE state = 'written' AND worker LIKE 'w1@%' LIMIT 1"
                ).fetchone()
            return row[0] if row else None

        victim = wait_until(
            held_by_w1,
            timeout=300,
            interval=0.05,
            message="w1 to hold a written batch",
            ignoring=(psycopg.Error,),
        )
        workers.kill("w1")
        out, err = coordinator.communicate(timeout=600)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    assert coordinator.returncode == 0, err + out

    with psycopg.connect(database) as conn:
        view = snapshot(conn)
        lexical = conn.execute("SELECT count(*) FROM chunks_lexical").fetchone()[0]
        state, finished = conn.execute(
            "SELECT state, finished_unix FROM index_job_items WHERE rel_path = %s", [victim]
        ).fetchone()
    assert view == reference["view"] and view["unembedded"] == [] and view["duplicates"] == []
    assert lexical == len(view["chunks"])
    assert state == "done" and finished  # the redelivered task finished what w1 started
    assert job_counters(status(root, env)) == job_counters(reference["status"])


def rest(up, path: str, body: dict | None = None) -> dict:
    response = up.rest(path, body)
    assert response.status_code == 200, response.text
    return response.json()


def lexical_matches(database: str, query: str) -> int:
    """Live chunks the lexical index matches on any word of ``query`` (the
    terms as corpus/index/lexical_pg.py sends them): 0 means a hit can only
    come from the dense index."""
    terms = tsquery(query_terms(query), require_all=False)
    assert terms, query
    with psycopg.connect(database) as conn:
        return conn.execute(
            "SELECT count(*) FROM chunks_lexical l JOIN chunks c ON c.chunk_id = l.chunk_id "
            "WHERE c.deleted = false AND l.body @@ %s::tsquery",
            [terms],
        ).fetchone()[0]


def shares_no_word(query: str, text: str) -> bool:
    """No token of ``query`` is one of ``text``'s, even once stemmed."""
    return not {stem(t) for t in tokens(query)} & {stem(t) for t in tokens(index_text(text))}


def chunk_texts(database: str, ids: list[int]) -> list[str]:
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            f"SELECT c.chunk_id, {CHUNK_TEXT} FROM chunks c "
            "JOIN representations r ON r.rep_id = c.representation_id WHERE c.chunk_id = ANY(%s)",
            [ids],
        ).fetchall()
    found = {row[0]: chunk_text(*row[1:]) for row in rows}
    return [found[i] for i in ids]


#: Words none of the tree's chunks holds, meaning its ``sheet_*`` functions.
SPREADSHEET = "spreadsheet workbook"
#: Words none of the tree's chunks nor SHIPPING holds, meaning SHIPPING.
POSTAGE = "postage price of mailing packages"
SHIPPING = (
    "def compute_shipping_cost(weight_kg, distance_km):\n"
    "    # freight charge for sending a parcel by courier\n"
    "    return 4.5 + weight_kg * 0.8 + distance_km * 0.05\n"
)


def test_up_with_a_broker_serves_what_the_workers_index_and_follows_changes(
    scaleout, database, reference, running
):
    """`up` with CELERY_BROKER_URL set (issue #17): its indexing child walks
    and hands the files to Celery workers, the vectors they store in
    PostgreSQL reach the serving process's dense index (DenseRefresher), and
    a file written meanwhile is found by meaning once live sync has it."""
    root, env, workers = scaleout
    workers.start("w1")
    workers.start("w2")
    announced(database, {"w1", "w2"})
    up = running("--dir", str(root), "--json", "--auth", "none", env=env)

    # The watch is ready once the first pass has ended: by then each half
    # of the index has said it is complete, as without a broker.
    up.event("watch_ready", timeout=300)
    events = up.events()
    names = [e["event"] for e in events]
    assert "dense_index_complete" in names, names
    assert (
        names.index("lexical_index_complete")
        < names.index("dense_index_complete")
        < names.index("watch_ready")
    )
    dense = events[names.index("dense_index_complete")]["data"]

    # The workers read, wrote and embedded every file; the index is the
    # single-process build's, every chunk with its vector.
    with psycopg.connect(database) as conn:
        view = snapshot(conn)
        by_worker = dict(
            conn.execute(
                "SELECT worker, count(*) FROM index_job_items WHERE state = 'done' GROUP BY worker"
            ).fetchall()
        )
    assert view == reference["view"] and view["unembedded"] == [] and view["duplicates"] == []
    host = os.uname().nodename
    assert set(by_worker) == {f"w1@{host}", f"w2@{host}"}, by_worker
    assert sum(by_worker.values()) == len(view["documents"])
    assert dense["chunks"] == dense["embedded"] == len(view["chunks"])

    stats = rest(up, "/api/v1/stats")
    indexer = stats["indexer"]
    assert indexer["mode"] == "process" and indexer["running"] and indexer["restarts"] == 0
    assert indexer["pid"] not in (None, up.proc.pid)
    assert indexer["dense"]["embedded"] == indexer["dense"]["total"] == len(view["chunks"])
    assert indexer["dense"]["eta_seconds"] == 0
    assert not stats["indexing"]["running"]
    assert job_counters(stats) == job_counters(reference["status"])

    def search(query: str) -> dict:
        return rest(up, "/api/v1/search", {"query": query, "k": 5, "index": "code"})

    # Found by meaning, from the vectors the workers stored: no chunk holds
    # a word of the query, so the lexical index has nothing to give.
    assert lexical_matches(database, SPREADSHEET) == 0

    def sheets(_):
        result = search(SPREADSHEET)
        texts = chunk_texts(database, [hit["chunk_id"] for hit in result["hits"][:3]])
        return result if len(texts) == 3 and all(t.startswith("def sheet_") for t in texts) else None

    result = up.wait_until(
        sheets, "the sheet_* functions first in the server's search", timeout=60, interval=ASKING_EVERY
    )
    assert result["dense"] == {"status": "ok"}
    top = chunk_texts(database, [result["hits"][0]["chunk_id"]])[0]
    assert shares_no_word(SPREADSHEET, top), top

    # Live sync goes on beside the broker: a file written now is found by meaning.
    (root / "shipping.py").write_text(SHIPPING)

    def shipping(_):
        hits = search(POSTAGE)["hits"]
        return hits if hits and hits[0]["rel_path"] == "shipping.py" else None

    up.wait_until(shipping, "the new file first in the server's search", timeout=120, interval=ASKING_EVERY)
    assert shares_no_word(POSTAGE, SHIPPING)
    assert lexical_matches(database, POSTAGE) == 0

    assert up.stop() == 0, up.stderr
    workers.stop()
    assert [proc.returncode for proc in workers.procs.values()] == [0, 0]
