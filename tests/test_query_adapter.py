"""The query-side adapter (corpus/adapter.py): the code index is searched
with ``unit(W · q)``, as the configured matrix says; ``off`` gives the
unadapted ranking back; an adapter fitted for another model is not applied;
the shipped matrix matches its provenance; the index records the adapter."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
from django.core.management import call_command

from corpus import adapter as query_adapter
from corpus.index.dense.embedding import from_bytes
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers.local import MODEL_NAME, LocalEmbedder
from corpus.retrieval import Searcher
from kernel.config import build_config

pytestmark = pytest.mark.django_db

FILES = {
    "mail/parser.py": (
        "import re\n\n\n"
        "def split_multipart(body, boundary):\n"
        '    return [p.strip() for p in body.split("--" + boundary) if p.strip()]\n\n\n'
        "def charset(content_type, default='utf-8'):\n"
        "    match = re.search(r'charset=([\\w-]+)', content_type)\n"
        "    return match.group(1) if match else default\n\n\n"
        "def render_invoice(lines):\n"
        "    return sum(line.price * line.quantity for line in lines)\n"
    ),
    "net/retry.py": (
        "import time\n\n\n"
        "def backoff(attempt, base=0.5):\n"
        "    return min(30.0, base * 2**attempt)\n\n\n"
        "def retry(call, attempts=5):\n"
        "    for attempt in range(attempts):\n"
        "        try:\n"
        "            return call()\n"
        "        except OSError:\n"
        "            time.sleep(backoff(attempt))\n"
        "    return call()\n"
    ),
}
QUESTION = "zqxv wvyq"  # no word of the corpus: the ranking is the dense one alone


@pytest.fixture(scope="module")
def embedder():
    return LocalEmbedder()


@pytest.fixture
def indexed(corpus_dir, state, embedder):
    for rel, text in FILES.items():
        path = corpus_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    config = build_config({"embed": {"provider": "local"}, "search": {"query_adapter": "off"}}, {}, {})
    index_directory(corpus_dir, state=state, config=config, embedder=embedder)
    return state


def write_adapter(folder, matrix: np.ndarray, model: str = MODEL_NAME):
    path = folder / "adapter.npy"
    np.save(path, matrix.astype(np.float32))
    path.with_suffix(".json").write_text(json.dumps({"model": model}))
    return path


def stored_code_vectors() -> dict[int, np.ndarray]:
    return {
        c.chunk_id: from_bytes(c.embedding)
        for c in Chunk.objects.filter(deleted=False, index_kind="code").exclude(embedding=None)
    }


def dense_order(state, embedder, adapter: str) -> list[int]:
    config = build_config(
        # fragment_share 1: the dense order itself, import-only units not moved last
        {
            "embed": {"provider": "local"},
            "search": {"query_adapter": adapter, "feedback_units": 0, "fragment_share": 1},
        },
        {},
        {},
    )
    found = Searcher(state, config, embedder).search(QUESTION, k=50, index="code")
    return [hit.chunk_id for hit in found.hits]


def by_cosine(stored: dict[int, np.ndarray], vector: np.ndarray) -> list[int]:
    return sorted(stored, key=lambda cid: (-float(stored[cid] @ vector), cid))


def test_the_code_index_is_searched_with_the_query_the_matrix_makes(indexed, embedder, tmp_path):
    """A real matrix that pulls every query towards the unit the plain query
    ranks last: the search's ranking is the exact ranking of the stored
    vectors by ``unit(W · q)``, and differs from the unadapted one, which
    ``off`` gives back unchanged."""
    stored = stored_code_vectors()
    query = embedder.embed_query(QUESTION, kind="code")
    plain = by_cosine(stored, query)
    last = stored[plain[-1]] / np.linalg.norm(stored[plain[-1]])
    matrix = 0.1 * np.eye(len(query)) + np.outer(last, query)  # W · q ≈ the last unit's direction
    path = write_adapter(tmp_path, matrix)

    moved = matrix.astype(np.float32) @ query
    moved /= np.linalg.norm(moved)
    assert np.allclose(query_adapter.load(str(path)).apply(query), moved, atol=1e-6)

    adapted = dense_order(indexed, embedder, str(path))
    off = dense_order(indexed, embedder, "off")
    assert adapted == by_cosine(stored, moved)[: len(adapted)]
    assert adapted[0] == plain[-1] != off[0]
    assert off == plain[: len(off)]


def test_an_adapter_fitted_for_another_model_is_not_applied(indexed, embedder, tmp_path):
    stored = stored_code_vectors()
    query = embedder.embed_query(QUESTION, kind="code")
    last = by_cosine(stored, query)[-1]
    matrix = np.outer(stored[last], query)
    path = write_adapter(tmp_path, matrix, model="some-other-model")

    assert query_adapter.for_query(str(path), MODEL_NAME, len(query)) is None
    assert dense_order(indexed, embedder, str(path)) == dense_order(indexed, embedder, "off")


def test_the_shipped_matrix_is_the_one_its_provenance_describes():
    provenance = json.loads(query_adapter.BUILTIN.with_suffix(".json").read_text())
    adapter = query_adapter.load("builtin")

    assert hashlib.sha256(query_adapter.BUILTIN.read_bytes()).hexdigest() == provenance["sha256"]
    assert adapter.model == provenance["model"] == MODEL_NAME
    assert list(adapter.matrix.shape) == provenance["shape"]
    assert provenance["pairs"]["sources"] and provenance["settings"]["seed"] is not None
    assert not np.allclose(adapter.matrix, np.eye(adapter.matrix.shape[0]))


def test_the_index_records_the_adapter_and_status_tells_a_different_one(indexed, corpus_dir, tmp_path):
    out = io.StringIO()
    call_command("status", "--dir", str(corpus_dir), "--state-dir", str(indexed.path), "--json", stdout=out)
    assert json.loads(out.getvalue())["query_adapter"]["recorded"] == "off"
    assert query_adapter.summary("off", MODEL_NAME) == {
        "configured": "off",
        "recorded": "off",
        "applies": False,
        "note": "",
    }
    other = write_adapter(tmp_path, np.eye(384))
    found = query_adapter.summary(str(other), MODEL_NAME)
    assert found["configured"].startswith("adapter.npy:") and found["applies"]
    assert "last built with off" in found["note"]
