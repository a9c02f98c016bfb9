"""The files indexed are the files git considers the work tree's, minus what
policy excludes, each exclusion counted by reason (issue #37).

git itself is the reference: ``git ls-files --cached --others
--exclude-standard`` on a generated repository with nested ``.gitignore``
files, negations, a rule no negation can undo (an ignored parent directory),
``.git/info/exclude``, a global excludes file (named by ``core.excludesFile``
or at git's XDG default) and a tracked file an ignore rule matches.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from corpus.events import Reporter
from corpus.gitignore import spec
from corpus.ingest.discover import FileEntry, walk
from corpus.ingest.exclusions import ExclusionTally, coverage_warning
from corpus.ingest.indexing import index_directory
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel.config import DEFAULT_PATH_EXCLUDES, build_config
from mcp_gateway import tools
from mcp_gateway.context import AuthSetup, Context

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs the git binary")

FILES = {
    ".gitignore": "*.pyc\n/vendor/\n# a comment\n\\#literal\n",
    "README.md": "readme",
    "#literal": "ignored by an escaped '#'",
    "new_untracked.txt": "untracked, ignored by nothing: git lists it with --others",
    "src/app.py": "print('app')",
    "src/app.pyc": "compiled",
    "src/keep.pyc": "re-included by src/.gitignore",
    "src/.gitignore": "!keep.pyc\n*.tmp\ngen/\n!gen/wanted.c\n",
    "src/scratch.tmp": "ignored by the nested file",
    "src/gen/out.c": "ignored directory",
    "src/gen/wanted.c": "a negation cannot undo an ignored parent directory",
    "docs/guide.md": "guide",
    "docs/draft/notes.md": "ignored by info/exclude",
    "logs/app.log": "ignored by the global excludes file",
    "logs/.gitignore": "!keep.log\n",
    "logs/keep.log": "a deeper .gitignore re-includes what the global file ignored",
    "vendor/lib.c": "ignored, but tracked (git add -f): git lists it",
    "vendor/extra.c": "ignored and untracked",
    "data/deep/.gitignore": "nested/*\n!nested/file.txt\n",
    "data/deep/nested/file.txt": "re-included below a '*' rule",
    "data/deep/nested/other.txt": "ignored by data/deep/.gitignore",
    "config/.env": "TOKEN=policy-excluded even though git lists it",
    "tools/build/Build.include": "a tracked build directory is source",
    "build/out.txt": "an untracked build directory is output: policy excludes it, git lists it",
}


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)
    return done.stdout.decode()


def git_considers(cwd: Path) -> set[str]:
    """The reference: every file git considers part of the work tree below ``cwd``."""
    listed = git(cwd, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    return {path for path in listed.split("\0") if path}


@pytest.fixture
def git_home(tmp_path: Path, monkeypatch) -> Path:
    """A HOME and XDG_CONFIG_HOME of the test's own, so no user's git config
    counts; dir2mcp's own records (kernel/config_trust.py, the state
    directories it made) stay where the run keeps them."""
    home = tmp_path / "home"
    home.mkdir()
    if "DIR2MCP_TRUST_DIR" not in os.environ:
        monkeypatch.setenv("DIR2MCP_TRUST_DIR", os.path.join(os.environ["XDG_CONFIG_HOME"], "dir2mcp"))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("GIT_DIR", raising=False)
    return home


def make_repo(root: Path, home: Path, monkeypatch, *, global_via: str) -> None:
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(root, "init", "-q")
    (root / ".git" / "info").mkdir(exist_ok=True)
    (root / ".git" / "info" / "exclude").write_text("draft/\n")
    if global_via == "core.excludesFile":
        excludes = home / "my-global-ignore"
        excludes.write_text("*.log\n")
        config = home / "gitconfig"
        config.write_text(f"[core]\n\texcludesFile = {excludes}\n")
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    else:  # git's default: $XDG_CONFIG_HOME/git/ignore
        (home / "xdg" / "git").mkdir(parents=True)
        (home / "xdg" / "git" / "ignore").write_text("*.log\n")
    git(root, "add", "-A")
    git(root, "add", "-f", "vendor/lib.c")
    git(root, "rm", "-q", "--cached", "new_untracked.txt", "build/out.txt")  # untracked, ignored by no rule


def walked(root: Path, tally: ExclusionTally | None = None) -> set[str]:
    engine = ExclusionEngine(root, ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), ()))
    return {item.rel_path for item in walk(engine, tally=tally) if isinstance(item, FileEntry)}


@pytest.mark.parametrize("global_via", ["core.excludesFile", "xdg-default"])
def test_walk_finds_what_git_ls_files_lists_minus_policy(tmp_path, git_home, monkeypatch, global_via) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    make_repo(root, git_home, monkeypatch, global_via=global_via)
    reference = git_considers(root)
    tally = ExclusionTally()

    found = walked(root, tally)

    assert found == reference - {"config/.env", "build/out.txt"}
    # The cases the reference must hold for the comparison to mean anything:
    assert {"vendor/lib.c", "src/keep.pyc", "logs/keep.log", "data/deep/nested/file.txt"} <= found
    assert "tools/build/Build.include" in found
    assert not {"logs/app.log", "docs/draft/notes.md", "src/gen/wanted.c", "vendor/extra.c"} & found
    assert tally.files["path_excludes"] == 1
    assert tally.reasons["gitignore: core.excludesFile"] == 1  # logs/app.log
    assert tally.reasons["gitignore: .git/info/exclude"] == 1  # the docs/draft directory
    assert tally.dirs["gitignore"] == 2  # docs/draft, src/gen: pruned, counted once each
    assert tally.dirs["default_ignore"] == 2  # .git, build


def test_a_root_below_the_top_of_the_work_tree_follows_the_rules_above_it(
    tmp_path, git_home, monkeypatch
) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    make_repo(root, git_home, monkeypatch, global_via="xdg-default")
    (root / "src" / "nested.pyc").write_text("ignored by the top's *.pyc")

    found = walked(root / "src")

    assert found == git_considers(root / "src")
    assert "nested.pyc" not in found and "keep.pyc" in found


def test_outside_a_work_tree_the_in_tree_gitignore_files_still_apply(tmp_path, git_home) -> None:
    root = tmp_path / "plain"
    (root / "sub").mkdir(parents=True)
    (root / ".gitignore").write_text("*.log\n")
    (root / "sub" / "a.log").write_text("x")
    (root / "sub" / "a.txt").write_text("x")
    (git_home / "xdg" / "git").mkdir(parents=True)
    (git_home / "xdg" / "git" / "ignore").write_text("*.txt\n")  # git reads it only inside a repository

    assert walked(root) == {".gitignore", "sub/a.txt"}


# -- the loud warning ---------------------------------------------------------


def test_coverage_warning_names_an_empty_index_and_one_far_larger_than_git() -> None:
    tally = ExclusionTally()
    tally.add("gitignore: .gitignore", is_dir=True)

    empty = coverage_warning(0, indexed=0, git_tracked=None, tally=tally)
    larger = coverage_warning(5000, indexed=5000, git_tracked=100)

    assert "0 files" in empty and "gitignore: .gitignore (1)" in empty
    assert "git tracks only 100" in larger
    assert coverage_warning(120, indexed=120, git_tracked=100) == ""
    assert "all 3 files found were skipped" in coverage_warning(3, indexed=0, git_tracked=None)


@pytest.mark.django_db
def test_a_tree_whose_gitignore_excludes_everything_says_so_in_up_status_and_stats(
    corpus_dir: Path, state, git_home
) -> None:
    # Debian's kernel tarball: a top-level .gitignore of "/*" and no .git.
    (corpus_dir / ".gitignore").write_text("/*\n")
    for rel in ("Makefile", "kernel/sched/core.c", "README"):
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_text("int main;\n")
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    out = io.StringIO()

    index_directory(corpus_dir, state=state, config=config, reporter=Reporter(out, json_mode=True))

    events = [json.loads(line) for line in out.getvalue().splitlines()]
    warnings = [e["data"]["message"] for e in events if e["event"] == "warning"]
    assert any("the index holds 0 files" in message for message in warnings)
    (found,) = [e["data"] for e in events if e["event"] == "coverage"]
    assert found["walked_files"] == 0
    assert found["excluded"]["gitignore"] == {"files": 3, "dirs": 1}  # .gitignore itself too

    ctx = Context(root=corpus_dir, state=state, config=config, auth=AuthSetup(token=None, source="none"))
    stats = tools.run(tools.table()["dir2mcp.stats"], {}, tools.Call(ctx))
    assert stats["content"][0]["text"].startswith("WARNING: the index holds 0 files")
    assert stats["structuredContent"]["coverage"]["git_tracked_files"] is None

    status = io.StringIO()
    call_command("status", "--dir", str(corpus_dir), "--state-dir", str(state.path), stdout=status)
    assert status.getvalue().startswith("WARNING: the index holds 0 files")


# -- the pre-check gives pathspec's answers -------------------------------------

RULE_LINES = [
    "*.pyc",
    "/vendor/",
    "!keep.pyc",
    "gen/",
    "!gen/wanted.c",
    "**/.env.*",
    "!**/.env.example",
    "nested/*",
    "!nested/file.txt",
    "docs/**/draft",
    "a?c[0-9].txt",
    "\\#literal",
    "trailing\\ ",
    *DEFAULT_PATH_EXCLUDES,
]
PATHS = [
    "x.pyc", "src/x.pyc", "src/keep.pyc", "vendor/", "vendor/a.c", "src/vendor/a.c", "gen/", "src/gen/out.c",
    "gen/wanted.c", ".env.local", "cfg/.env.example", "nested/a", "nested/file.txt", "docs/a/b/draft",
    "docs/draft", "abc1.txt", "abcd.txt", "#literal", "trailing ", "README.md", "id_rsa", "k/server.pem",
    "deep/node_modules/x.js", "\udcff.txt",
]  # fmt: skip


@pytest.mark.parametrize("path", PATHS)
def test_the_one_regex_pre_check_answers_as_pathspec_does(path: str) -> None:
    rules = spec(RULE_LINES)

    for candidate in (path, path.rstrip("/") + "/"):
        ours, theirs = rules.check_file(candidate), rules.spec.check_file(candidate)
        assert (ours.include, ours.index) == (theirs.include, theirs.index), candidate


@pytest.mark.django_db
def test_a_whole_pass_prints_its_coverage_line_by_kind(corpus_dir: Path, state, git_home) -> None:
    (corpus_dir / ".gitignore").write_text("*.log\n")
    for rel in ("a.py", "b.md", "c.log", "blob.bin", "k/server.pem"):
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_bytes(b"\x00\x01\x02" * 50 if rel.endswith(".bin") else b"text\n")
    out = io.StringIO()
    config = build_config({"embed": {"provider": "none"}}, {}, {})

    index_directory(corpus_dir, state=state, config=config, reporter=Reporter(out))

    (line,) = [line for line in out.getvalue().splitlines() if line.startswith("Coverage:")]
    assert line.startswith("Coverage: 4 files found, 3 indexed; left out: ")
    assert "gitignore=1 files" in line and "path_excludes=1 files" in line and "binary=1" in line
    assert "WARNING" not in out.getvalue()
