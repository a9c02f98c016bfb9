"""A worker works for one named corpus (issue #24, item 2).

Real Celery worker processes on the machine's Redis and PostgreSQL, as in
tests/test_scaleout_workers.py (each test its own database and queue):

- a worker, or any command, with ``DATABASE_URL`` or ``CELERY_BROKER_URL``
  and no ``DIR2MCP_ROOT``/``--dir`` stops with one ``CONFIG_INVALID`` line
  and exit status 2, and writes nothing in its working directory;
- a worker whose root is not the one the database records stops the same
  way before it takes a task;
- a worker started on a fresh database, which records no root yet, puts the
  first task of another corpus back on the queue and stops: a worker of
  that corpus then does the whole job, with no error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.test_cli import REPO, cli
from tests.test_crash import write_tree
from tests.test_scaleout_workers import Workers, announced, scaleout_env

pytestmark = pytest.mark.slow

NO_EMBEDDER = {"DIR2MCP_EMBED__PROVIDER": "none"}  # quicker workers: these tests are about roots


def worker_command(name: str, queue: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "dir2mcp_site", "worker", "-c", "1",
            "-n", f"{name}@%h", "-Q", queue, "--without-mingle", "--without-gossip",
            "--loglevel=INFO"]  # fmt: skip


def run_refused_worker(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """A worker expected to stop on its own, before it takes any task."""
    env = {**env, "PYTHONPATH": str(REPO)}  # started from ``cwd``, not the repository
    proc = subprocess.Popen(
        worker_command("refused", env["DIR2MCP_CELERY_QUEUE"]), cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # it did not stop: the test fails on its return code
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ERROR:")]


@pytest.fixture
def roots(tmp_path, pg_database):
    """The corpus (a tree), its environment, and an empty working directory."""
    root = tmp_path / "corpus"
    write_tree(root)
    env = {**scaleout_env(root, pg_database), **NO_EMBEDDER}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return root, env, elsewhere


def test_no_root_on_a_shared_store_or_queue_is_one_config_error(roots):
    root, env, elsewhere = roots
    rootless = {k: v for k, v in env.items() if k != "DIR2MCP_ROOT"}

    worker = run_refused_worker(rootless, elsewhere)
    assert worker.returncode == 2, worker.stderr[-3000:]
    [line] = error_lines(worker.stderr)
    assert line.startswith("ERROR: CONFIG_INVALID: DATABASE_URL and CELERY_BROKER_URL are set"), line
    assert "DIR2MCP_ROOT" in line and str(elsewhere) in line
    assert list(elsewhere.iterdir()) == []  # no .dir2mcp/ in the working directory

    for shared in ("DATABASE_URL", "CELERY_BROKER_URL"):
        only = {k: v for k, v in rootless.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
        done = cli("status", "--json", cwd=elsewhere, env={**only, shared: rootless[shared]})
        assert done.returncode == 2, done.stderr
        assert error_lines(done.stderr) == [done.stderr.strip()], done.stderr
        assert done.stderr.startswith(f"ERROR: CONFIG_INVALID: {shared} is set but no root is")
        assert list(elsewhere.iterdir()) == []

    # Named with --dir, the same command works; help and version need no root.
    assert cli("status", "--dir", str(root), "--json", cwd=elsewhere, env=rootless).returncode == 0
    assert cli("version", cwd=elsewhere, env=rootless).returncode == 0
    assert list(elsewhere.iterdir()) == []


def test_a_plain_local_process_still_takes_its_working_directory(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\nthe quokkaword lives here\n")
    done = cli("reindex", cwd=tmp_path, env={"DATABASE_URL": "", "CELERY_BROKER_URL": ""})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / ".dir2mcp" / "meta.sqlite").is_file()


def test_a_worker_for_another_root_stops_before_it_takes_a_task(roots, pg_database, tmp_path):
    root, env, elsewhere = roots
    workers = Workers(env, tmp_path)
    try:
        workers.start("w1")
        done = cli("reindex", "--dir", str(root), env=env, timeout=600)
        assert done.returncode == 0, done.stderr + done.stdout
    finally:
        workers.stop()

    other = tmp_path / "other"
    other.mkdir()
    refused = run_refused_worker({**env, "DIR2MCP_ROOT": str(other)}, elsewhere)
    assert refused.returncode == 2, refused.stderr[-3000:]
    [line] = error_lines(refused.stderr)
    assert line.startswith(f"ERROR: CONFIG_INVALID: this worker's root {other} is not the root of the corpus")
    assert f"DIR2MCP_ROOT={root}" in line, line
    with psycopg.connect(pg_database) as conn:
        names = [row[0] for row in conn.execute("SELECT name FROM workers")]
    assert [n.split("@")[0] for n in names] == ["w1"]  # the refused worker never announced itself

    missing = run_refused_worker({**env, "DIR2MCP_ROOT": str(tmp_path / "absent")}, elsewhere)
    assert missing.returncode == 3, missing.stderr[-3000:]
    assert error_lines(missing.stderr) == [
        f"ERROR: ROOT_INACCESSIBLE: root directory {tmp_path / 'absent'} does not exist or cannot be read"
    ]
    assert not (tmp_path / "absent").exists()


def test_a_task_for_another_corpus_goes_back_to_the_queue(roots, pg_database, tmp_path):
    """On a fresh database no root is recorded, so a worker for another
    directory starts; the first task tells it otherwise."""
    root, env, _ = roots
    stray = tmp_path / "stray"
    stray.mkdir()  # empty: had it read the job's paths, they would be gone
    strays = Workers({**env, "DIR2MCP_ROOT": str(stray)}, tmp_path / "stray-logs")
    (tmp_path / "stray-logs").mkdir()
    workers = Workers(env, tmp_path)
    coordinator = None
    try:
        strays.start("stray")
        announced(pg_database, {"stray"})
        coordinator = subprocess.Popen(
            [sys.executable, str(REPO / "manage.py"), "reindex", "--dir", str(root)],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert strays.procs["stray"].wait(300) == 2  # it stopped on its own at the first task
        log = (tmp_path / "stray-logs" / "stray.log").read_text()
        [line] = error_lines(log)
        assert line.startswith(f"ERROR: CONFIG_INVALID: this worker's root {stray} is not the root"), line
        workers.start("w1")
        out, err = coordinator.communicate(timeout=600)
        assert coordinator.returncode == 0, err + out
    finally:
        if coordinator is not None and coordinator.poll() is None:
            coordinator.kill()
            coordinator.wait(30)
        strays.stop()
        workers.stop()

    with psycopg.connect(pg_database) as conn:
        by_worker = dict(conn.execute("SELECT worker, state FROM index_job_items GROUP BY worker, state"))
        documents = conn.execute("SELECT count(*) FROM documents WHERE deleted = false").fetchone()[0]
        errors = conn.execute("SELECT errors, deleted FROM index_jobs").fetchall()
    assert by_worker == {f"w1@{os.uname().nodename}": "done"}, by_worker
    assert documents == sum(1 for p in root.rglob("*") if p.is_file() and ".dir2mcp" not in p.parts)
    assert errors == [(0, 0)]
    with contextlib.suppress(FileNotFoundError):
        assert not any(p.is_file() for p in (stray / ".dir2mcp").rglob("*.sqlite"))
