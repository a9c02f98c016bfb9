"""Shared fixtures: a temporary corpus directory, an isolated state dir,
and indexing that corpus in-process."""

from __future__ import annotations

import compileall
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Keep the approvals of root config files (kernel/config_trust.py) in a
    directory of the run's own, inherited by every process a test starts,
    never the user's ~/.config/dir2mcp: through XDG_CONFIG_HOME, which the
    tests that clear DIR2MCP_* variables keep. XDG_CACHE_HOME likewise.

    Write the project's bytecode caches before any test starts a process.

    Where PYTHONDONTWRITEBYTECODE is set (as on the shared machine), no
    process writes them, so every `manage.py` the suite starts (several
    hundred; `up` is two processes) compiled our 200-odd modules from
    source: 0.2 of its 1.3 CPU-seconds to start. Caches are only read
    when they match the source, so what runs is the same.

    And pytest itself may then keep the test modules it rewrites for its
    assertions (``tests/__pycache__/*-pytest-*.pyc``), as it does wherever
    bytecode is written: else each worker rewrote all 160 of them on every
    run, some 10 CPU-seconds each before its first test. Only this process
    writes: what it starts still inherits PYTHONDONTWRITEBYTECODE."""
    os.environ.pop("DIR2MCP_TRUST_DIR", None)
    config.dir2mcp_config_home = tempfile.mkdtemp(prefix="dir2mcp-config-home-")
    os.environ["XDG_CONFIG_HOME"] = config.dir2mcp_config_home
    # and the compiled local model (corpus.providers.local.compiled_cache_dir):
    # one compilation for the run, never the user's ~/.cache/dir2mcp
    os.environ["XDG_CACHE_HOME"] = os.path.join(config.dir2mcp_config_home, "cache")
    if sys.dont_write_bytecode:
        for package in ("corpus", "dir2mcp_site", "kernel", "mcp_gateway", "payments", "tests"):
            compileall.compile_dir(REPO / package, quiet=1)
        sys.dont_write_bytecode = False


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "dir2mcp_config_home", ""), ignore_errors=True)


#: The files that took longest in a whole run, longest first, one a line
#: (docs/benchmarks.md, "Test suite time", says how it was measured).
LONGEST_FILES = [
    line.strip()
    for line in (REPO / "tests" / "longest_files.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]


def pytest_collection_modifyitems(items):
    """The files that took longest run first, longest first; then the other
    files with end-to-end tests (marked ``slow``); then the rest; each
    file's tests in their own order. ``make test`` hands each worker the
    next file as it finishes one (``--dist loadfile
    --no-loadscope-reorder``), so the long files start early and the suite
    ends on short in-process files that keep both workers busy. xdist's
    own order (most tests first) left files of a few long tests, the crash
    series and the branch switch, for last, running on one worker while
    the other had nothing left to take; and the slow-marked files in name
    order left two long files without the mark (`test_wal`,
    `test_tombstones`: a minute each on a loaded machine) among the last."""
    rank = {f"tests/{name}": place for place, name in enumerate(LONGEST_FILES)}
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def order(item) -> tuple[int, int]:
        file = item.nodeid.split("::")[0]
        if file in rank:
            return (0, rank[file])
        return (1 if file in slow_files else 2, 0)

    items.sort(key=order)


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    """An empty directory to fill with files; it is the root being indexed."""
    root = tmp_path / "corpus"
    root.mkdir()
    return root


def _state_at(path: Path):
    # the models behind corpus.index.dense.embedding load once pytest-django has set Django up
    from corpus.index.dense import embedding
    from kernel.state import StateDir

    state = StateDir(path)
    state.ensure()
    yield state
    embedding.drop_store(state)


@pytest.fixture
def state(tmp_path: Path):
    """An empty state directory outside the corpus (as ``--state-dir`` gives);
    its dense store is dropped from the process's cache afterwards, so the
    next test's loads afresh."""
    yield from _state_at(tmp_path / "state")


@pytest.fixture
def root_state(corpus_dir: Path):
    """An empty state directory where `up` keeps it by default: ``<corpus_dir>/.dir2mcp``."""
    yield from _state_at(corpus_dir / ".dir2mcp")


@pytest.fixture
def index(corpus_dir: Path, state):
    """Write files under the corpus root, then index it in-process into
    ``state``: ``index({"a.py": "...", "gone.md": None})`` (None deletes).
    Default config unless ``config=`` is given; returns the job's counters."""
    from corpus.ingest.indexing import index_directory
    from kernel.config import build_config

    def run(files: dict[str, str | bytes | None] | None = None, *, config=None, mode: str = "incremental"):
        for rel, data in (files or {}).items():
            path = corpus_dir / rel
            if data is None:
                path.unlink()
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, bytes):
                path.write_bytes(data)
            else:
                path.write_text(data, encoding="utf-8")
        config = config if config is not None else build_config({}, {}, {})
        return index_directory(corpus_dir, state=state, config=config, mode=mode)

    return run


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


@pytest.fixture(autouse=True)
def lexical_table_follows_flush(request):
    """After a ``transaction=True`` test Django flushes the model tables, but
    not the lexical index's FTS5 table, which no model owns: its rows would
    outlive their chunks into the next test of the worker."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is None or not marker.kwargs.get("transaction"):
        return
    from corpus.index import lexical  # noqa: PLC0415  (after Django's setup, which conftest precedes)

    lexical.clear()
