"""Hostile round of 2026-11-30, session 29: the corpus surfaces (completions,
search's ``match``, navigation, ``find``, reads, prompts); see
docs/security.md, "Hostile round, 2026-11-30 (session 29): the corpus
surfaces". Each test shows a probe that answered otherwise before its fix.
A file excluded since the index was written (a ``.gitignore`` line, as
under ``up --no-index``) must not be named, counted or probed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from kernel.config import build_config
from kernel.jsontypes import JsonObject
from kernel.state import StateDir
from mcp_gateway import completion, context
from mcp_gateway.context import Context
from tests.test_review26 import indexed

CONFIG = {"embed": {"provider": "none"}, "chat": {"provider": "none"}}


def built(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]
) -> Context:
    """``files`` written and indexed; the completion tables this index's."""
    for rel, text in files.items():
        (corpus_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (corpus_dir / rel).write_text(text)
    config = build_config(CONFIG, {}, {})
    index_directory(corpus_dir, state=state, config=config)
    monkeypatch.setattr(completion, "PATHS", completion.Cached(completion.build_paths))
    monkeypatch.setattr(completion, "SYMBOLS", completion.Cached(completion.build_symbols))
    return context.build(root=corpus_dir, state=state, config=config, auth_spec="none")


def completed(ctx: Context, name: str, value: str) -> JsonObject:
    params = {"ref": {"type": "ref/prompt", "name": "explain"}, "argument": {"name": name, "value": value}}
    got = completion.complete(ctx, params)["completion"]
    assert isinstance(got, dict)
    return got


# -- completions -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_name_a_readable_fifth_file_defines_is_offered(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The symbol table kept, for each name, the first four files defining
    it (``FILES_PER_NAME``): with those four excluded now, a name a fifth,
    readable file defines was not offered (left open by session 26). Every
    defining file is kept now, judged in turn until one passes."""
    files = {f"src/m{n}.py": "def shared_handler(value):\n    return value\n" for n in range(8)}
    ctx = built(corpus_dir, state, monkeypatch, files)
    units = Chunk.objects.order_by("chunk_id").values_list("representation__document__rel_path", flat=True)
    *excluded, _readable = dict.fromkeys(units)  # the files in the order the table reads them
    assert len(excluded) == 7, excluded
    (corpus_dir / ".gitignore").write_text("".join(f"{rel}\n" for rel in excluded))
    got = completed(ctx, "symbol", "shared_")
    assert got == {"values": ["shared_handler"], "total": 1, "hasMore": False}, got  # before: no value
    (corpus_dir / ".gitignore").write_text("src/\n")
    monkeypatch.setattr(completion, "SYMBOLS", completion.Cached(completion.build_symbols))  # verdicts anew
    assert completed(ctx, "symbol", "shared_") == {"values": [], "total": 0, "hasMore": False}


@pytest.mark.django_db
def test_a_path_completion_names_no_folder_only_excluded_files_occupy(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path completion offered each folder entry the index's files made,
    judging the folder alone: ``keys/``, whose two files a ``*.secret`` line
    excludes now, was offered (its name, and that indexed files lie there);
    and ``certs/``, holding one readable file and one excluded, was offered
    as a folder where a folder of one file completes straight to it (a
    count of the excluded file). A folder is offered now while a file
    under it passes, and as that file when it is the only one that does."""
    files = {
        "keys/a.secret": "alpha\n",
        "keys/b.secret": "beta\n",
        "certs/public.txt": "public\n",
        "certs/private.secret": "private\n",
        "docs/one.txt": "one\n",
        "docs/two.txt": "two\n",
    }
    ctx = built(corpus_dir, state, monkeypatch, files)
    assert completed(ctx, "path", "")["values"] == ["certs/", "docs/", "keys/"]
    (corpus_dir / ".gitignore").write_text("*.secret\n")
    monkeypatch.setattr(completion, "PATHS", completion.Cached(completion.build_paths))  # verdicts anew
    got = completed(ctx, "path", "")
    # before: ["certs/", "docs/", "keys/"]
    assert got == {"values": ["certs/public.txt", "docs/"], "total": 2, "hasMore": False}, got
    assert completed(ctx, "path", "k") == {"values": [], "total": 0, "hasMore": False}
    assert completed(ctx, "path", "keys/")["values"] == []


@pytest.mark.django_db
def test_a_total_is_given_whenever_the_readable_values_are_few_enough(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer gave a total only when the range, excluded values included,
    held at most ``JUDGED`` values: ``JUDGED`` readable names and one only
    an excluded file defines answered no total where ``JUDGED`` readable
    names alone answered ``total: JUDGED``, so whether a total came told
    of an excluded name in the range (narrowing the prefix, its first
    characters). The total now counts readable values alone, whatever the
    excluded ones."""
    ctx = indexed(corpus_dir, state, monkeypatch, completion.JUDGED)
    for name, value in (("symbol", "handler_"), ("path", "src/")):
        got = completed(ctx, name, value)
        assert got.get("total") == completion.JUDGED, (name, got.get("total"))  # before: no total
        assert len(got["values"]) == completion.MAX_VALUES


# -- search's match past excluded full matches ---------------------------------------------------

#: all four words of the long query, in every unit holding them
WORDS = "walrus tusk blubber floe"


@pytest.mark.django_db
def test_a_readable_full_match_past_the_excluded_ones_is_seen(
    corpus_dir: Path, state: StateDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query of more than ``search.all_terms_first_max`` terms takes its
    full matches from the first ``limit`` units holding every term, in the
    order they are stored, and keeps the readable ones: with more than
    ``limit`` units of excluded files first, a readable full match past them
    was not seen (so ``match`` could say weak; left open by session 28).
    Pages of units outside the files passed over are read now."""
    limit = 50  # search.candidates at its least (the largest k)
    files = {f"private/p{n:03}.txt": f"Log {n}: {WORDS}.\n" for n in range(limit + 10)}
    files["zz/zoo.txt"] = f"Zoo: {WORDS}.\n"
    ctx = built(corpus_dir, state, monkeypatch, files)
    config = build_config({**CONFIG, "search": {"candidates": limit}}, {}, {})
    ctx = context.build(root=corpus_dir, state=state, config=config, auth_spec="none")
    units = Chunk.objects.order_by("chunk_id").values_list("representation__document__rel_path", flat=True)
    assert list(units)[-1] == "zz/zoo.txt"  # stored after every excluded unit
    (corpus_dir / ".gitignore").write_text("private/\n")
    full = ctx.searcher.ranked(WORDS).full_matches
    assert [Chunk.objects.get(chunk_id=cid).representation.document.rel_path for cid in full] == [
        "zz/zoo.txt"
    ]
    # the control: nothing readable holds them all
    (corpus_dir / ".gitignore").write_text("private/\nzz/\n")
    assert ctx.searcher.ranked(WORDS).full_matches == ()
