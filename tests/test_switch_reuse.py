"""Switching back to a tree seen before reuses its vectors (issue #37, item 3).

A branch switch tombstones the units of the files it changes or deletes;
switching back brings the same units back. Each one revives its tombstoned
chunk (same representation, same text hash): the chunk keeps its id and its
vector, so only the units never seen before are embedded, and the database
does not grow with each switch. After it, the index holds what a clean build
holds: the same chunks, the same vectors, the same search answers. A vector
made by another model is never brought back.

Real processes (``reindex --incremental`` as live sync runs it); Mistral is
the fake at the network edge, whose vector depends on the model and the text,
so "the fake was asked for these texts" is "these vectors were made".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import CHUNK_TEXT, chunk_text, read_only
from tests.test_cli import cli, mistral_env

pytestmark = pytest.mark.slow

EMBED = "/v1/embeddings"
KEPT, CHANGED, ONLY = 12, 12, 8
QUERIES = ("add up the invoice totals", "notes about the ledger", "fetch_changed3")


def python_module(name: str, version: str) -> str:
    return (
        f'"""The {name} module ({version})."""\n\n\n'
        f"def {name}_total(invoices):\n"
        f'    """Add up the invoice totals of {name} ({version})."""\n'
        f"    return sum(i.amount for i in invoices) + {len(version)}\n\n\n"
        f"def fetch_{name}(rows, key):\n"
        f"    return rows.get(key, {version!r})\n"
    )


def note(name: str, version: str) -> str:
    return f"# Notes on {name}\n\nThe ledger of {name} is kept {version}.\n\n## Later\n\nMore about {name}.\n"


def tree(commit: str) -> dict[str, str]:
    """The files of commit ``a`` or ``b``: some shared, some changed, some its own."""
    files = {}
    for i in range(KEPT):
        files[f"kept/kept{i}.py"] = python_module(f"kept{i}", "stable")
        files[f"docs/kept{i}.md"] = note(f"kept{i}", "weekly")
    for i in range(CHANGED):
        files[f"src/changed{i}.py"] = python_module(f"changed{i}", f"version {commit}")
        files[f"docs/changed{i}.md"] = note(f"changed{i}", f"on branch {commit}")
    for i in range(ONLY):
        files[f"only_{commit}/file{i}.py"] = python_module(f"only{commit}{i}", commit)
    return files


def check_out(root: Path, files: dict[str, str]) -> None:
    """Make the tree hold exactly ``files``, as ``git checkout`` does: what is
    unchanged is left alone (its mtime too), the rest written or deleted."""
    for path in [p for p in root.rglob("*") if p.is_file() and ".dir2mcp" not in p.parts]:
        if path.relative_to(root).as_posix() not in files:
            path.unlink()
    for rel, text in files.items():
        path = root / rel
        if path.is_file() and path.read_text() == text:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def reindex(root: Path, state: Path, env: dict, *, full: bool = False) -> None:
    mode = [] if full else ["--incremental"]
    result = cli(
        "reindex", *mode, "--dir", str(root), "--state-dir", str(state), "--quiet", env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr


def embedded_texts(fake, since: int) -> list[str]:
    """The texts the fake was asked to embed from request number ``since`` on."""
    return [text for request in fake.requests_to(EMBED)[since:] for text in request.body["input"]]


def live_units(state: Path) -> dict[tuple[str, int], tuple[int, str, bytes | None]]:
    """(path, ordinal) of each live chunk: (chunk id, text, vector)."""
    with read_only(state / "meta.sqlite") as conn:
        rows = conn.execute(
            f"SELECT d.rel_path, c.ordinal, c.chunk_id, c.embedding, {CHUNK_TEXT} FROM chunks c "
            "JOIN representations r ON r.rep_id = c.representation_id "
            "JOIN documents d ON d.doc_id = r.document_id WHERE c.deleted = 0 AND d.deleted = 0"
        ).fetchall()
    return {
        (rel, ordinal): (cid, chunk_text(*text), embedding) for rel, ordinal, cid, embedding, *text in rows
    }


def chunk_rows(state: Path) -> int:
    with read_only(state / "meta.sqlite") as conn:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def search_only(root: Path, state: Path, env: dict, query: str) -> dict:
    """``ask --mode search_only --json`` on ``root``'s index in ``state``: its answer."""
    args = ["--mode", "search_only", "--json", "--dir", str(root), "--state-dir", str(state)]
    result = cli("ask", query, *args, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def answers(root: Path, state: Path, env: dict) -> list[list[tuple]]:
    """The hits of each query (path, span, snippet, score), from the dense
    and lexical indexes fused."""
    found = []
    for query in QUERIES:
        data = search_only(root, state, env, query)
        assert data["dense"] == {"status": "ok"}
        found.append([(hit["rel_path"], hit["span"], hit["snippet"], hit["score"]) for hit in data["hits"]])
    return found


def same_as_clean_build(root: Path, state: Path, tmp_path: Path, env: dict) -> None:
    clean = tmp_path / f"clean-{len(list(tmp_path.glob('clean-*')))}"
    reindex(root, clean, env, full=True)
    switched, built = live_units(state), live_units(clean)
    assert {key: value[1:] for key, value in switched.items()} == {
        key: value[1:] for key, value in built.items()
    }
    assert all(vector for _, _, vector in switched.values())
    assert answers(root, state, env) == answers(root, clean, env)


def test_switching_back_embeds_only_what_was_never_seen(tmp_path, fake_mistral):
    root, state = tmp_path / "repo", tmp_path / "state"
    root.mkdir()
    env = mistral_env(fake_mistral)
    check_out(root, tree("a"))
    reindex(root, state, env)
    at_a = live_units(state)

    check_out(root, tree("b"))
    asked = len(fake_mistral.requests_to(EMBED))
    reindex(root, state, env)
    to_b = embedded_texts(fake_mistral, asked)
    rows_after_one_round = chunk_rows(state)

    # Back to a, with one file no commit had: only its units are new.
    check_out(root, {**tree("a"), "docs/fresh.md": note("fresh", "never before")})
    asked = len(fake_mistral.requests_to(EMBED))
    reindex(root, state, env)
    back_to_a = embedded_texts(fake_mistral, asked)
    now = live_units(state)

    # b's changed and own units were new, a's come back with their chunks and vectors
    assert len(to_b) >= 2 * CHANGED + ONLY
    fresh = [key for key in now if key[0] == "docs/fresh.md"]
    assert len(back_to_a) == len(fresh) >= 1 and all("fresh" in text for text in back_to_a)
    assert {key: value for key, value in now.items() if key[0] != "docs/fresh.md"} == at_a
    same_as_clean_build(root, state, tmp_path, env)

    # Another round trip makes no new chunk rows: b's come back too.
    for commit in ("b", "a"):
        check_out(root, {**tree(commit), "docs/fresh.md": note("fresh", "never before")})
        asked = len(fake_mistral.requests_to(EMBED))
        reindex(root, state, env)
        assert embedded_texts(fake_mistral, asked) == []
    assert chunk_rows(state) == rows_after_one_round + len(fresh)


def test_a_vector_of_another_model_is_never_brought_back(tmp_path, fake_mistral):
    root, state = tmp_path / "repo", tmp_path / "state"
    root.mkdir()
    first = mistral_env(fake_mistral)
    second = {**first, "DIR2MCP_MISTRAL__EMBED_TEXT_MODEL": "mistral-embed-2312"}
    check_out(root, tree("a"))
    reindex(root, state, first)
    check_out(root, tree("b"))
    reindex(root, state, first)
    # A full reindex switches the model: every vector, tombstoned ones too, is made again.
    reindex(root, state, second, full=True)

    check_out(root, tree("a"))
    asked = len(fake_mistral.requests_to(EMBED))
    reindex(root, state, second)
    requests = fake_mistral.requests_to(EMBED)[asked:]

    # a's changed and own prose units come back without their first model's vector
    prose = [
        text
        for request in requests
        if request.body["model"] == "mistral-embed-2312"
        for text in request.body["input"]
    ]
    changed_prose = [key for key in live_units(state) if key[0].startswith("docs/changed")]
    assert len(prose) == len(changed_prose) >= CHANGED
    assert all(request.body["model"] in ("mistral-embed-2312", "codestral-embed") for request in requests)
    same_as_clean_build(root, state, tmp_path, second)
