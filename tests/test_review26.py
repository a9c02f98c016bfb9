"""Review of the session 26 security changes (completion screened against
the rules as they are now): what an answer's ``total`` still told of a file
excluded since the index was written."""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.ingest.indexing import index_directory
from kernel.config import build_config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir
from mcp_gateway import completion, context
from mcp_gateway.context import Context

pytestmark = pytest.mark.django_db

#: more files in ``src`` (and more names ``handler_`` begins) than one answer judges
FILES = 105


def indexed(corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch, files: int) -> Context:
    """``src`` holds ``files`` files, each defining one ``handler_NNN``, and
    ``src/zz_secret.py`` defining ``handler_zz_secret``: sorted last, past
    the first 101 values an answer used to judge. It is indexed, then
    excluded by a ``.gitignore`` line (as under ``up --no-index``)."""
    src = corpus_dir / "src"
    src.mkdir()
    for n in range(files):
        (src / f"m{n:03}.py").write_text(f"def handler_{n:03}(value):\n    return value + {n}\n")
    (src / "zz_secret.py").write_text("def handler_zz_secret(value):\n    return value\n")
    config = build_config({"embed": {"provider": "none"}, "chat": {"provider": "none"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    (corpus_dir / ".gitignore").write_text("src/zz_secret.py\n")
    # Tables of this test's index (another test's may be cached in the process).
    monkeypatch.setattr(completion, "PATHS", completion.Cached(completion.build_paths))
    monkeypatch.setattr(completion, "SYMBOLS", completion.Cached(completion.build_symbols))
    return context.build(root=corpus_dir, state=state, config=config, auth_spec="none")


@pytest.fixture
def ctx(corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch) -> Context:
    return indexed(corpus_dir, state, monkeypatch, FILES)


def answer(ctx: Context, name: str, value: str) -> JsonObject:
    params = {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": name, "value": value}}
    got = completion.complete(ctx, params)["completion"]
    assert isinstance(got, dict)
    return got


@pytest.mark.parametrize(
    ("name", "value", "excluded"),
    [("path", "src/", "src/zz_secret.py"), ("symbol", "handler_", "handler_zz_secret")],
)
def test_a_total_never_counts_what_the_rules_exclude_now(
    ctx: Context, name: str, value: str, excluded: str
) -> None:
    """Before: only the first 101 values of a range were judged and the
    rest counted in ``total`` unjudged, so the total for ``src/`` (or
    ``handler_``) was one more than the values a client could page to: the
    excluded file's (or name's) existence, and by narrowing the prefix
    its first characters, showed through the count."""
    got = answer(ctx, name, value)
    assert excluded not in got["values"]
    assert got["total"] == FILES, got["total"]  # before: FILES + 1
    assert got["hasMore"] is True


def test_a_range_longer_than_an_answer_judges_has_no_total(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past :data:`completion.JUDGED` values the total is not known without
    judging the whole range (a cost that grows with the tree): it is left
    out, never counted unjudged (before: JUDGED + 2 here, the excluded
    file's among them)."""
    ctx = indexed(corpus_dir, state, monkeypatch, completion.JUDGED + 1)
    got = answer(ctx, "path", "src/")
    assert "total" not in got and got["hasMore"] is True, got.get("total")
    assert len(got["values"]) == completion.MAX_VALUES
