"""Discovery walk (spec §7.1): pruning, ordering, symlink policy and unreadable directories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from corpus.ingest.discover import FileEntry, WalkProblem, walk
from corpus.security import ExclusionEngine, ExclusionPolicy
from kernel import errors
from kernel.config import DEFAULT_PATH_EXCLUDES
from kernel.errors import Dir2mcpError
from tests.support import drop_file_permission_override

PROJECT_DIR = Path(__file__).resolve().parent.parent


def policy(**overrides) -> ExclusionPolicy:
    return ExclusionPolicy(tuple(DEFAULT_PATH_EXCLUDES), (), **overrides)


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def files(engine: ExclusionEngine, **kwargs) -> list[str]:
    return [item.rel_path for item in walk(engine, **kwargs) if isinstance(item, FileEntry)]


def problems(engine: ExclusionEngine) -> list[WalkProblem]:
    return [item for item in walk(engine) if isinstance(item, WalkProblem)]


def test_walk_yields_regular_files_with_size_and_mtime(corpus_dir: Path) -> None:
    readme = write(corpus_dir / "docs" / "readme.md", "hello")
    os.utime(readme, ns=(1_000_000_000, 1_700_000_000_123_456_789))
    (entry,) = walk(ExclusionEngine(corpus_dir, policy()))
    assert entry == FileEntry("docs/readme.md", readme, 5, 1_700_000_000_123_456_789)


def test_walk_order_is_sorted_files_first_then_subdirectories(corpus_dir: Path) -> None:
    for rel in ["b.txt", "a.txt", "z/2.txt", "z/1.txt", "m/x.txt", "m/n/y.txt", "C.txt"]:
        write(corpus_dir / rel)
    expected = ["C.txt", "a.txt", "b.txt", "m/x.txt", "m/n/y.txt", "z/1.txt", "z/2.txt"]
    engine = ExclusionEngine(corpus_dir, policy())
    assert files(engine) == expected
    assert files(engine) == expected


def test_walk_prunes_default_dirs_path_excludes_and_state_dir(corpus_dir: Path) -> None:
    for rel in [
        "src/app.py",
        "build",  # a file, not the build directory
        ".git/config",
        "web/node_modules/react/index.js",
        "pkg/__pycache__/mod.cpython-311.pyc",
        "dist/app.whl",
        ".venv/bin/python",
        ".dir2mcp/index.sqlite",
        "var/state/meta.sqlite",
        "conf/.env",
        "certs/site.pem",
        "certs/site.key",
    ]:
        write(corpus_dir / rel)
    engine = ExclusionEngine(corpus_dir, policy(), state_dir=corpus_dir / "var" / "state")
    assert files(engine) == ["build", "src/app.py"]


def test_walk_honours_nested_gitignore_with_negation(corpus_dir: Path) -> None:
    write(corpus_dir / ".gitignore", "*.log\ntmp/\n")
    write(corpus_dir / "sub" / ".gitignore", "!keep.log\n")
    for rel in ["a.log", "a.txt", "tmp/cache.txt", "sub/keep.log", "sub/drop.log", "sub/deeper/keep.log"]:
        write(corpus_dir / rel)
    assert files(ExclusionEngine(corpus_dir, policy())) == [
        ".gitignore",
        "a.txt",
        "sub/.gitignore",
        "sub/keep.log",
        "sub/deeper/keep.log",
    ]
    assert "a.log" in files(ExclusionEngine(corpus_dir, policy(use_gitignore=False)))


@pytest.fixture
def linked(corpus_dir: Path, tmp_path: Path) -> Path:
    write(corpus_dir / "real" / "doc.md")
    write(corpus_dir / ".env")
    write(tmp_path / "outside" / "secret.txt")
    (corpus_dir / "file_link.md").symlink_to(corpus_dir / "real" / "doc.md")
    (corpus_dir / "dir_link").symlink_to(corpus_dir / "real", target_is_directory=True)
    (corpus_dir / "escape_file").symlink_to(tmp_path / "outside" / "secret.txt")
    (corpus_dir / "escape_dir").symlink_to(tmp_path / "outside", target_is_directory=True)
    (corpus_dir / "real" / "loop").symlink_to("..", target_is_directory=True)
    (corpus_dir / "env_link").symlink_to(corpus_dir / ".env")
    (corpus_dir / "dangling").symlink_to(corpus_dir / "nowhere")
    return corpus_dir


def test_walk_skips_symlinks_silently_by_default(linked: Path) -> None:
    items = list(walk(ExclusionEngine(linked, policy())))
    assert [item.rel_path for item in items] == ["real/doc.md"]
    assert all(isinstance(item, FileEntry) for item in items)


def test_walk_follows_symlinks_under_root_and_reports_escapes_and_loops(linked: Path) -> None:
    items = list(walk(ExclusionEngine(linked, policy(follow_symlinks=True))))
    found = [i.rel_path for i in items if isinstance(i, FileEntry)]
    reported = {(i.rel_path, i.code) for i in items if isinstance(i, WalkProblem)}
    assert found == ["file_link.md", "dir_link/doc.md", "real/doc.md"]
    assert reported == {
        ("escape_file", errors.PATH_OUTSIDE_ROOT),
        ("escape_dir", errors.PATH_OUTSIDE_ROOT),
        ("dir_link/loop", errors.FORBIDDEN),
        ("real/loop", errors.FORBIDDEN),
    }


def test_walk_terminates_on_mutual_symlink_loops(corpus_dir: Path) -> None:
    write(corpus_dir / "a" / "x.txt")
    write(corpus_dir / "b" / "y.txt")
    (corpus_dir / "a" / "to_b").symlink_to("../b", target_is_directory=True)
    (corpus_dir / "b" / "to_a").symlink_to("../a", target_is_directory=True)
    (corpus_dir / "self").symlink_to("self")
    items = list(walk(ExclusionEngine(corpus_dir, policy(follow_symlinks=True))))
    found = [i.rel_path for i in items if isinstance(i, FileEntry)]
    reported = {(i.rel_path, i.code) for i in items if isinstance(i, WalkProblem)}
    assert found == ["a/x.txt", "a/to_b/y.txt", "b/y.txt", "b/to_a/x.txt"]
    assert reported == {
        ("a/to_b/to_a", errors.FORBIDDEN),
        ("b/to_a/to_b", errors.FORBIDDEN),
        ("self", errors.EXTRACT_FAILED),
    }


# Each link's verdict in the walk is the resolver's: a link the walk lists
# is one every reader opens, and one the resolver refuses is never listed.
# Columns: the link's target, the resolver's refusal of "link", the problem the walk reports.
SIBLING = errors.PATH_OUTSIDE_ROOT
LINK_TARGETS = [
    pytest.param("docs/a.txt", None, None, id="file-inside"),
    pytest.param("docs", None, None, id="directory-inside"),
    pytest.param("../corpus2/secret.txt", SIBLING, SIBLING, id="sibling-whose-name-starts-with-the-roots"),
    pytest.param("{root}2/secret.txt", SIBLING, SIBLING, id="absolute-into-that-sibling"),
    pytest.param("../corpus/docs/a.txt", SIBLING, SIBLING, id="climbs-out-and-back-in"),
    pytest.param("{root}/docs/a.txt", None, None, id="absolute-inside"),
    pytest.param("{root}/docs/", None, None, id="absolute-with-trailing-separator"),
    pytest.param("{upper}/docs/a.txt", SIBLING, SIBLING, id="root-spelled-in-other-case"),
    pytest.param(".", None, errors.FORBIDDEN, id="the-root-itself-is-a-loop-not-walked"),
    pytest.param("docs/.env", errors.FORBIDDEN, None, id="excluded-target-passed-over"),
    pytest.param("nowhere", errors.FILE_NOT_FOUND, None, id="dangling-passed-over"),
    pytest.param("link", errors.FILE_NOT_FOUND, errors.EXTRACT_FAILED, id="self-loop-reported"),
]


@pytest.mark.parametrize(("target", "refused", "reported"), LINK_TARGETS)
def test_the_walk_and_the_resolver_agree_on_each_link(
    tmp_path: Path, target: str, refused: str | None, reported: str | None
) -> None:
    root = tmp_path / "corpus"
    write(root / "docs" / "a.txt")
    write(root / "docs" / ".env")
    write(tmp_path / "corpus2" / "secret.txt")
    (root / "link").symlink_to(target.format(root=root, upper=str(root).upper()))
    engine = ExclusionEngine(root, policy(follow_symlinks=True))
    items = [item for item in walk(engine) if item.rel_path.split("/")[0] == "link"]
    listed = [item.rel_path for item in items if isinstance(item, FileEntry)]
    assert {item.code for item in items if isinstance(item, WalkProblem)} == ({reported} - {None})
    if refused is None:
        assert engine.resolve("link").path.is_relative_to(root)
        assert all(engine.resolve(rel).path.is_relative_to(root) for rel in listed)
        assert bool(listed) is (reported is None)
    else:
        with pytest.raises(Dir2mcpError) as info:
            engine.resolve("link")
        assert info.value.code == refused
        assert listed == []


def test_a_walk_below_a_root_of_slash_follows_links_anywhere(corpus_dir: Path, tmp_path: Path) -> None:
    target = write(tmp_path / "elsewhere" / "doc.md")
    (corpus_dir / "link.md").symlink_to(target)
    engine = ExclusionEngine(Path("/"), policy(follow_symlinks=True))
    start = str(corpus_dir).lstrip("/")
    assert files(engine, start=start) == [f"{start}/link.md"]


def test_walk_raises_root_inaccessible_for_missing_or_non_directory_root(tmp_path: Path) -> None:
    a_file = write(tmp_path / "file.txt")
    for root in (tmp_path / "missing", a_file):
        with pytest.raises(Dir2mcpError) as info:
            list(walk(ExclusionEngine(root, policy())))
        assert info.value.code == errors.ROOT_INACCESSIBLE


def test_walk_from_start_covers_only_that_subtree(corpus_dir: Path) -> None:
    for rel in ["top.txt", "sub/a.txt", "sub/inner/b.txt", "sub/c.log", "other/d.txt"]:
        write(corpus_dir / rel)
    write(corpus_dir / ".gitignore", "*.log\n")
    engine = ExclusionEngine(corpus_dir, policy())
    assert files(engine, start="sub") == ["sub/a.txt", "sub/inner/b.txt"]
    assert files(engine, start="sub/inner/b.txt") == ["sub/inner/b.txt"]
    assert files(engine, start="./sub/inner/b.txt") == []  # one name per path: callers pass it
    assert files(engine, start="sub/c.log") == []
    assert files(engine, start="gone") == []
    assert [i.code for i in walk(engine, start="../etc")] == [errors.PATH_OUTSIDE_ROOT]


_WALK_SCRIPT = """
import json, sys
from pathlib import Path
from corpus.ingest.discover import walk
from corpus.security import ExclusionEngine, ExclusionPolicy
engine = ExclusionEngine(Path(sys.argv[1]), ExclusionPolicy((), ()))
print(json.dumps([[type(i).__name__, i.rel_path, getattr(i, "code", "")] for i in walk(engine)]))
"""


def _walk_without_permission_override(root: Path) -> list[list[str]]:
    if os.geteuid() != 0:
        return [
            [type(i).__name__, i.rel_path, getattr(i, "code", "")]
            for i in walk(ExclusionEngine(root, policy()))
        ]
    result = subprocess.run(
        [sys.executable, "-c", _WALK_SCRIPT, str(root)],
        cwd=PROJECT_DIR,
        preexec_fn=drop_file_permission_override,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot drop CAP_DAC_OVERRIDE to test permissions as root: {result.stderr[-300:]}")
    return json.loads(result.stdout)


def test_walk_reports_unreadable_directory_and_continues(corpus_dir: Path) -> None:
    write(corpus_dir / "a.txt")
    write(corpus_dir / "locked" / "hidden.txt")
    write(corpus_dir / "open" / "b.txt")
    (corpus_dir / "locked").chmod(0)
    try:
        items = _walk_without_permission_override(corpus_dir)
    finally:
        (corpus_dir / "locked").chmod(0o755)
    assert items == [
        ["FileEntry", "a.txt", ""],
        ["WalkProblem", "locked", errors.FORBIDDEN],
        ["FileEntry", "open/b.txt", ""],
    ]
