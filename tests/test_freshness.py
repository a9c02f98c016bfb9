"""Every answer says how fresh it is (issue #37 item 4): search, ask, find,
list_files, open_file and the navigation tools carry ``freshness`` (the
changes live sync has not yet written, whether indexing runs, the cited files
changed on disk since they were indexed), on a real index through the tool
table, and in a process that only serves."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile

import httpx
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from jsonschema import Draft202012Validator

from corpus.freshness import MAX_CHECKED, freshness
from corpus.ingest.indexing import index_directory
from corpus.ingest.pending import PendingChanges, pending_count
from corpus.security import ExclusionEngine
from kernel.config import DEFAULT_PATH_EXCLUDES, build_config
from mcp_gateway import tools
from mcp_gateway.context import AuthSetup, Context
from tests import mcp_http

CONFIG = build_config({"embed": {"provider": "none"}}, {}, {})
LOADER = (
    "def load_config(path):\n    return read_text(path)\n\n\n"
    "def read_text(path):\n    return open(path).read()\n"
)
FILES = {
    "src/loader.py": LOADER,
    "docs/guide.md": "# Guide\n\nThe loader reads configuration files with load_config.\n",
}
#: a call of each tool whose answer cites src/loader.py
CALLS = {
    "dir2mcp.search": {"query": "load_config"},
    "dir2mcp.ask": {"question": "load_config", "mode": "search_only"},
    "dir2mcp.open_file": {"rel_path": "src/loader.py"},
    "dir2mcp.list_files": {},
    "dir2mcp.find": {"content": "load_config"},
    "dir2mcp.outline": {"rel_path": "src/loader.py"},
    "dir2mcp.symbols": {"name": "load_config"},
    "dir2mcp.references": {"name": "read_text"},
}


def write(root, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


@pytest.fixture
def served(corpus_dir, state):
    write(corpus_dir, FILES)
    index_directory(corpus_dir, state=state, config=CONFIG)
    return Context(root=corpus_dir, state=state, config=CONFIG, auth=AuthSetup(None, "none"))


def run(ctx: Context, name: str, arguments: dict) -> dict:
    tool = tools.table()[name]
    result = tools.run(tool, arguments, tools.Call(ctx))
    assert not result.get("isError"), result
    Draft202012Validator(tool.output_schema).validate(result["structuredContent"])
    return result


def fresh_of(result: dict) -> dict:
    return result["structuredContent"]["freshness"]


@pytest.mark.django_db
def test_exactly_the_citing_tools_declare_freshness():
    table = tools.table()
    declaring = {name for name, tool in table.items() if "freshness" in tool.output_schema["properties"]}
    assert declaring == set(CALLS)


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(CALLS))
def test_an_answer_from_a_current_index_says_it_is_fresh(served, name):
    result = run(served, name, CALLS[name])
    found = fresh_of(result)
    assert (found["pending_changes"], found["indexing"], found["stale"]) == (0, False, [])
    assert found["as_of"].endswith("Z") and "unchecked" not in found
    assert "Freshness:" not in result["content"][0]["text"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_file_changed_since_indexing_is_stale_in_every_answer_citing_it(served, corpus_dir, name):
    (corpus_dir / "src/loader.py").write_text(LOADER + "\n\ndef save_config(path):\n    pass\n")

    changed = run(served, name, CALLS[name])
    assert fresh_of(changed)["stale"] == ["src/loader.py"]
    assert "changed on disk since indexed: src/loader.py" in changed["content"][0]["text"]

    index_directory(corpus_dir, state=served.state, config=CONFIG)
    assert fresh_of(run(served, name, CALLS[name]))["stale"] == []


@pytest.mark.django_db
def test_a_deleted_file_and_a_changed_archives_members_are_stale(served, corpus_dir):
    with zipfile.ZipFile(corpus_dir / "bundle.zip", "w") as bundle:
        bundle.writestr("inner.txt", "quokka census inside the bundle\n")
    index_directory(corpus_dir, state=served.state, config=CONFIG)
    assert run(served, "dir2mcp.search", {"query": "quokka census"})["structuredContent"]["hits"]

    (corpus_dir / "docs/guide.md").unlink()
    stamp = os.stat(corpus_dir / "bundle.zip").st_mtime_ns + 5_000_000_000
    os.utime(corpus_dir / "bundle.zip", ns=(stamp, stamp))  # the same bytes, touched

    member = fresh_of(run(served, "dir2mcp.search", {"query": "quokka census"}))
    assert member["stale"] == ["bundle.zip!/inner.txt"]
    listed = fresh_of(run(served, "dir2mcp.list_files", {}))
    assert listed["stale"] == ["bundle.zip", "bundle.zip!/inner.txt", "docs/guide.md"]


@pytest.mark.django_db
def test_pending_changes_are_what_live_sync_saw_and_has_not_written(served):
    pending = PendingChanges(ExclusionEngine.from_config(served.root, CONFIG))
    pending.publish()  # the watch starting: nothing waits
    assert fresh_of(run(served, "dir2mcp.search", CALLS["dir2mcp.search"]))["pending_changes"] == 0

    first = pending.saw({"src/loader.py", "docs/new.md"})
    pending.publish()
    result = run(served, "dir2mcp.symbols", CALLS["dir2mcp.symbols"])
    assert fresh_of(result)["pending_changes"] == 2
    assert "2 changed paths not yet indexed" in result["content"][0]["text"]

    pending.taken(first)
    second = pending.saw({"src/loader.py"})  # changed again while its first change is applied
    pending.written({"src/loader.py", "docs/new.md"})
    pending.publish()
    assert pending_count() == 1

    pending.taken(second)
    pending.written({"src/loader.py"})
    pending.publish()
    assert fresh_of(run(served, "dir2mcp.find", CALLS["dir2mcp.find"]))["pending_changes"] == 0


@pytest.mark.django_db
def test_pending_changes_count_only_paths_the_policy_indexes(corpus_dir):
    excludes = [*DEFAULT_PATH_EXCLUDES, "private/**"]
    config = build_config({"embed": {"provider": "none"}, "security": {"path_excludes": excludes}}, {}, {})
    write(corpus_dir, {".gitignore": "build.log\n", ".env": "API_KEY=x\n", "private/plan.md": "# Plan\n"})
    pending = PendingChanges(ExclusionEngine.from_config(corpus_dir, config))
    seen = {".env", "id_rsa", "private/plan.md", "build.log", "src/loader.py", "docs/gone.md"}
    pending.saw(seen)
    pending.publish()
    assert (pending.count, pending_count()) == (2, 2)  # src/loader.py and the deleted docs/gone.md


@pytest.mark.django_db
def test_stats_and_status_carry_the_pending_count_answers_carry(served, corpus_dir, state):
    def status(*flags: str) -> str:
        out = io.StringIO()
        call_command("status", "--dir", str(corpus_dir), "--state-dir", str(state.path), *flags, stdout=out)
        return out.getvalue()

    pending = PendingChanges(ExclusionEngine.from_config(corpus_dir, CONFIG))
    pending.publish()
    stats = run(served, "dir2mcp.stats", {})
    assert stats["structuredContent"]["pending_changes"] == 0
    assert "Pending changes" not in stats["content"][0]["text"] and "Pending changes" not in status()

    pending.saw({"src/loader.py", "docs/new.md", "docs/gone.md"})
    pending.publish()
    stats = run(served, "dir2mcp.stats", {})
    answer = fresh_of(run(served, "dir2mcp.search", CALLS["dir2mcp.search"]))["pending_changes"]
    assert stats["structuredContent"]["pending_changes"] == answer == 3
    assert "Pending changes: 3 " in stats["content"][0]["text"]
    assert "Pending changes: 3 (seen by live sync, not yet indexed)" in status()
    assert json.loads(status("--json"))["pending_changes"] == 3


def test_a_walk_of_the_whole_tree_writes_every_change_taken_before_it(corpus_dir):
    pending = PendingChanges(ExclusionEngine.from_config(corpus_dir, CONFIG))
    taken = pending.saw({"a.txt", "b/c.txt"})
    later = pending.saw({"d.txt"})
    pending.taken(taken)
    pending.written()  # a walk: everything up to the batch taken
    assert pending.count == 1
    pending.taken(later)
    pending.written()
    assert pending.count == 0


@pytest.mark.django_db
def test_the_cost_of_freshness_does_not_grow_with_what_is_cited(served, corpus_dir):
    few = ["src/loader.py"]
    many = [f"gone/{n}.txt" for n in range(MAX_CHECKED + 25)]
    with CaptureQueriesContext(connection) as one:
        freshness(corpus_dir, few)
    with CaptureQueriesContext(connection) as lots:
        found = freshness(corpus_dir, many)
    assert len(lots.captured_queries) == len(one.captured_queries) <= 3
    assert (len(found.stale), found.unchecked) == (MAX_CHECKED, 25)


@pytest.mark.django_db
def test_a_cut_to_max_tokens_names_only_the_stale_files_it_kept(served, corpus_dir):
    write(corpus_dir, {f"notes/{n:03}.txt": f"note {n}\n" for n in range(120)})
    index_directory(corpus_dir, state=served.state, config=CONFIG)
    (corpus_dir / "src/loader.py").write_text("changed\n")  # listed last, in path order

    whole = run(served, "dir2mcp.list_files", {})
    cut = run(served, "dir2mcp.list_files", {"max_tokens": 2000})

    assert fresh_of(whole)["stale"] == ["src/loader.py"]
    assert cut["structuredContent"]["budget"]["truncated"] is True
    assert "src/loader.py" not in {f["rel_path"] for f in cut["structuredContent"]["files"]}
    assert fresh_of(cut)["stale"] == []


@pytest.mark.slow
def test_a_process_that_only_serves_tells_a_stale_answer_from_a_fresh_one(corpus_dir):
    """A daphne that indexes and watches nothing (as behind a load balancer
    beside the indexing ``up``), over MCP and the REST mirror; the pending
    count another process's live sync records reaches it through the database."""
    mcp_http.write_corpus(corpus_dir)
    env = mcp_http.base_env(DIR2MCP_ROOT=str(corpus_dir))
    with mcp_http.daphne_serving(corpus_dir) as server:
        session = server.initialize()
        search = {"query": "parse_config_file"}
        before = server.call(session, "dir2mcp.search", search)["structuredContent"]["freshness"]
        (corpus_dir / "src/loader.py").write_text("def parse_config_file(path, strict):\n    return path\n")
        after = server.call(session, "dir2mcp.search", search, msg_id=2)
        rest = httpx.get(
            server.url.removesuffix("/mcp") + "/api/v1/search",
            params=search,
            headers={"Authorization": f"Bearer {server.token}"},
            timeout=30,
        )
        subprocess.run(
            [sys.executable, str(mcp_http.REPO / "manage.py"), "shell", "-c", RECORD_PENDING],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        pending = server.call(session, "dir2mcp.symbols", {"name": "parse_config_file"}, msg_id=3)
        mcp_http.index(corpus_dir, env)
        settled = server.call(session, "dir2mcp.search", search, msg_id=4)["structuredContent"]["freshness"]

    assert (before["pending_changes"], before["stale"]) == (0, [])
    assert after["structuredContent"]["freshness"]["stale"] == ["src/loader.py"]
    assert "changed on disk since indexed: src/loader.py" in after["content"][0]["text"]
    assert rest.status_code == 200 and rest.json()["freshness"]["stale"] == ["src/loader.py"]
    assert pending["structuredContent"]["freshness"]["pending_changes"] == 1
    assert (settled["stale"], settled["indexing"]) == ([], False)


#: What a watcher records when it sees one change (another process: `manage.py shell`).
RECORD_PENDING = (
    "from pathlib import Path; from corpus.ingest.pending import PendingChanges; "
    "from corpus.security import ExclusionEngine; from kernel.config import build_config; "
    "p = PendingChanges(ExclusionEngine.from_config(Path.cwd(), build_config({}, {}, {}))); "
    "p.saw({'notes.txt'}); p.publish()"
)
