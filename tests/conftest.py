"""Shared fixtures: a temporary corpus directory and an isolated state dir."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    """An empty directory to fill with files; it is the root being indexed."""
    root = tmp_path / "corpus"
    root.mkdir()
    return root


@pytest.fixture
def state(tmp_path: Path):
    """An empty state directory; its dense store is dropped from the
    process's cache afterwards, so the next test's loads afresh."""
    # the models behind corpus.embedding load once pytest-django has set Django up
    from corpus import embedding
    from corpus.state import StateDir

    state = StateDir(tmp_path / "state")
    state.ensure()
    yield state
    embedding._STORES.pop(state.path, None)


PG_SERVER = "postgres://postgres@127.0.0.1:5432"


@pytest.fixture
def pg_database():
    """A fresh PostgreSQL database on the machine's server (``.ci/services``
    starts it), dropped after the test: its URL."""
    import uuid

    import psycopg

    name = f"dir2mcp_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield f"{PG_SERVER}/{name}"
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


from tests.fakes.mistral import fake_mistral  # noqa: E402, F401
from tests.up_process import running  # noqa: E402, F401  (a fixture: `up` processes, killed after the test)
