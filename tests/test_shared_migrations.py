"""Migrations of one PostgreSQL database from several machines at once.

Machines that share a database do not share a state directory, so the
file lock in it cannot order them; the advisory lock on the database does
(corpus/store.py: migrate). Four processes, each with its own state
directory (as four machines have), open the store of one fresh database at
the same moment, four times over: every one succeeds, and the database ends
migrated once.

Four rounds, not the ten this ran before: with the advisory lock taken out
of corpus/store.py, each of four rounds failed (2026-11-28, on a machine
loaded enough to start the four processes unevenly), so a round finds the
race on its own; each costs about 7 CPU-seconds (four processes, one
migration).
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest

from tests.mcp_http import REPO, base_env

pytestmark = pytest.mark.slow

PROCESSES = 4
ROUNDS = 4  # each found the race alone without the lock (see above)


def fresh(server: str, name: str) -> str:
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_four_machines_migrate_one_fresh_database_at_once(pg_database, tmp_path, round_):
    server, _, name = pg_database.rpartition("/")
    url = fresh(server, f"{name}_r{round_}")
    procs = []
    for n in range(PROCESSES):
        root = tmp_path / f"machine{n}"
        root.mkdir()
        env = base_env(DATABASE_URL=url)
        procs.append(
            subprocess.Popen(
                [sys.executable, str(REPO / "manage.py"), "status", "--dir", str(root), "--json"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        done = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    failed = [
        (proc.returncode, err[-2000:])
        for proc, (_, err) in zip(procs, done, strict=True)
        if proc.returncode != 0
    ]
    assert not failed, failed
    with psycopg.connect(url) as conn:
        applied = conn.execute(
            "SELECT app, name, count(*) FROM django_migrations GROUP BY app, name"
        ).fetchall()
    assert applied and all(count == 1 for _, _, count in applied)
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}_r{round_}" WITH (FORCE)')
