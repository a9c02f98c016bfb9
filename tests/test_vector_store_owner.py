"""Only the process that owns indexing (it holds the index lock: ``index``,
``reindex``, `up`'s indexing child) records ``rag.vector_store``; a one-off
command configured with another store uses the recorded one, so it never
flips the store of a running ``up`` (whose server and child would each build
the index again). The embedder is the fake Mistral server at the network edge."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import read_only
from tests.test_cli import cli, mistral_env

pytestmark = pytest.mark.slow

CORPUS = {
    "pets.md": "Cats and dogs are popular household animals that people keep for company.\n",
    "finance.md": "Quarterly revenue grew because interest rates on bonds increased.\n",
}


def recorded_store(root: Path) -> str | None:
    with read_only(root / ".dir2mcp" / "meta.sqlite") as db:
        row = db.execute("SELECT value FROM settings WHERE key = 'vector_store'").fetchone()
    return row[0] if row else None


def saved(root: Path) -> dict[str, bytes]:
    state = root / ".dir2mcp"
    return {path.name: path.read_bytes() for path in sorted(state.glob("vectors_*.hnsw*"))}


def test_a_one_off_command_with_another_store_leaves_the_recorded_store_and_the_file(
    corpus_dir, fake_mistral
) -> None:
    for rel, text in CORPUS.items():
        (corpus_dir / rel).write_text(text)
    env = mistral_env(fake_mistral)
    built = cli("reindex", "--dir", str(corpus_dir), env={**env, "DIR2MCP_RAG__VECTOR_STORE": "hnswlib"})
    assert built.returncode == 0, built.stderr
    assert recorded_store(corpus_dir) == "hnswlib"
    files = saved(corpus_dir)
    assert "vectors_text.hnsw" in files and json.loads(files["vectors_text.hnsw.json"])["store"] == "hnswlib"

    asked = cli(
        "ask",
        "household animals",
        "--dir",
        str(corpus_dir),
        "--json",
        env={**env, "DIR2MCP_RAG__VECTOR_STORE": "usearch-i8"},
    )
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout)["hits"][0]["rel_path"] == "pets.md"
    assert recorded_store(corpus_dir) == "hnswlib"
    assert saved(corpus_dir) == files
