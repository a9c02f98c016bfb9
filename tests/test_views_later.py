"""Views later (corpus.index.dense.embedding): every pending code unit is
embedded alone first and stored with its own vector, then the signature
views are embedded and each unit's vector replaced by the blend, the one
both embedded together make; files a client asked about get both at once."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Sequence

import numpy as np
import pytest
from django.db import connection

from corpus.events import Reporter
from corpus.index.dense import embedding
from corpus.index.dense.embedding import (
    DenseStore,
    check_models,
    dense_store,
    embed_chunks,
    embed_first,
    embed_pending,
    from_bytes,
    recipe_summary,
    views_pending,
)
from corpus.index.dense.vectors import VectorIndex, index_path
from corpus.index.dense.views import VIEW_VERSION, embedding_text, signature_view
from corpus.ingest.pipeline import Indexer
from corpus.models import Chunk
from corpus.providers.base import Embedder, Interrupted, ModelInfo
from corpus.status import indexing_complete
from kernel.config import build_config
from tests.factories import ChunkFactory

WEIGHT = 0.3
DIM = 8
#: scores as the default vector store keeps vectors (rag.vector_store usearch-bf16:
#: a component within 2^-8 of its size): a vector and another apart by far more
SCORE_ATOL = 0.01


class _Hashed(Embedder):
    """A text's vector is a hash of the text (the same in any batch); each
    call's texts are kept. ``stop_at_views``: the first call of signature
    views alone sets ``stop`` and is interrupted, as a stop during it is."""

    provider = "fake"
    texts_per_call = 4
    interruptible = True

    def __init__(self, views: set[str] = frozenset(), stop_at_views: threading.Event | None = None) -> None:
        self.calls: list[list[str]] = []
        self.views = views
        self.stop_at_views = stop_at_views

    def model_info(self, kind: str) -> ModelInfo:
        return ModelInfo(self.provider, "fake", DIM)

    def embed(self, texts: Sequence[str], *, kind: str, stop: threading.Event | None = None) -> np.ndarray:
        if self.stop_at_views is not None and all(text in self.views for text in texts):
            self.stop_at_views.set()
            raise Interrupted
        self.calls.append(list(texts))
        return np.stack([vector(text) for text in texts])


def vector(text: str) -> np.ndarray:
    raw = np.frombuffer(hashlib.sha256(text.encode()).digest()[: DIM * 2], dtype=np.int16).astype(np.float32)
    return raw / np.linalg.norm(raw)


def unit_text(chunk: Chunk) -> str:
    return embedding_text(chunk.context, chunk.text, "code", None)


def view_text(chunk: Chunk) -> str:
    return signature_view(chunk.context, chunk.text, VIEW_VERSION)[0]


def blended(chunk: Chunk) -> np.ndarray:
    return (vector(unit_text(chunk)) + WEIGHT * vector(view_text(chunk))) / (1 + WEIGHT)


def code_chunks(count: int) -> list[Chunk]:
    return [
        ChunkFactory(
            index_kind="code",
            context=f"src/mod{n}.py",
            text=f"def handler_{n}(request):\n    return respond(request, {n})",
        )
        for n in range(count)
    ]


def stored(chunk: Chunk) -> np.ndarray:
    return from_bytes(Chunk.objects.get(chunk_id=chunk.chunk_id).embedding)


def scores(store: DenseStore, chunks: list[Chunk], wanted: list[np.ndarray]) -> list[float]:
    """Each chunk's score in the code index for its ``wanted`` vector (the
    inner product the index holds for it: ``wanted @ held``)."""
    index = store.sync("code")
    assert index is not None
    found = []
    for chunk, query in zip(chunks, wanted, strict=True):
        hits = {hit.chunk_id: hit.score for hit in index.search(query, k=len(chunks))}
        found.append(hits[chunk.chunk_id])
    return found


def assert_holds_blends(store: DenseStore, chunks: list[Chunk]) -> None:
    """``store``'s code index holds each chunk's blend, not its own vector alone."""
    wanted = [blended(c) for c in chunks]
    assert np.allclose(scores(store, chunks, wanted), [float(w @ w) for w in wanted], atol=SCORE_ATOL)


@pytest.mark.django_db
def test_every_unit_is_embedded_before_any_view_and_ends_as_both_together_make_it(state) -> None:
    chunks = code_chunks(6)
    fake = _Hashed()
    check_models(fake, state, signature_weight=WEIGHT)

    done = embed_pending(fake, state, batch_size=4)

    units, views = {unit_text(c) for c in chunks}, {view_text(c) for c in chunks}
    assert done == 6
    # two calls of units alone, then two of views alone
    assert [set(call) <= units for call in fake.calls] == [True, True, False, False]
    assert all(set(call) <= views for call in fake.calls[2:])
    for chunk in chunks:
        assert np.allclose(stored(chunk), blended(chunk), atol=1e-6)
    assert views_pending().count() == 0
    # this process's index holds the blends, not the units' own vectors
    assert_holds_blends(dense_store(state), chunks)


@pytest.mark.django_db
def test_units_without_their_views_yet_are_searched_and_said_to_wait(state) -> None:
    chunks = code_chunks(5)
    stop = threading.Event()
    check_models(_Hashed(), state, signature_weight=WEIGHT)
    other = DenseStore(state)  # a server's store in another process

    done = embed_pending(_Hashed({view_text(c) for c in chunks}, stop), state, stop=stop, batch_size=4)

    assert done == 5 and stop.is_set()
    for chunk in chunks:
        assert np.allclose(stored(chunk), vector(unit_text(chunk)), atol=1e-6)
    own = [vector(unit_text(c)) for c in chunks]
    assert np.allclose(scores(other, chunks, own), 1.0, atol=SCORE_ATOL)  # found by their own vectors
    assert recipe_summary(WEIGHT)["note"].startswith("5 code vectors are their unit's alone")
    assert views_pending().count() == 5
    assert not indexing_complete(dense=True)

    embed_pending(_Hashed(), state, batch_size=4)

    assert views_pending().count() == 0 and recipe_summary(WEIGHT)["note"] == ""
    # the other store replaces the vectors it held when it syncs
    assert_holds_blends(other, chunks)


@pytest.mark.django_db
def test_a_saved_index_loaded_later_takes_the_views_stored_after_it(state) -> None:
    chunks = code_chunks(4)
    stop = threading.Event()
    check_models(_Hashed(), state, signature_weight=WEIGHT)
    embed_pending(_Hashed({view_text(c) for c in chunks}, stop), state, stop=stop, batch_size=4)
    # the file now holds the units' own vectors; another process stores the views (database only)
    embed_chunks(_Hashed(), [c.chunk_id for c in chunks], batch_size=4)

    loaded = DenseStore(state)

    assert views_pending().count() == 0
    assert_holds_blends(loaded, chunks)


@pytest.mark.django_db
def test_a_file_asked_about_gets_its_units_and_views_at_once(state) -> None:
    chunks = code_chunks(6)
    asked = chunks[4]
    fake = _Hashed()
    check_models(fake, state, signature_weight=WEIGHT)
    embed_first.add([asked.representation.document.rel_path])

    embed_pending(fake, state, batch_size=4)

    assert fake.calls[0] == [unit_text(asked), view_text(asked)]
    assert np.allclose(stored(asked), blended(asked), atol=1e-6)
    assert all(unit_text(asked) not in call for call in fake.calls[1:])


@pytest.mark.django_db
def test_a_file_asked_after_its_units_were_stored_alone_gets_its_views_before_other_units(state) -> None:
    # Every unit of the first files is stored alone (its views interrupted),
    # then more units arrive pending, and a client asks about one of the
    # first files: its views come before the new units and before the other
    # views, which wait for every unit in id order.
    first = code_chunks(4)
    stop = threading.Event()
    check_models(_Hashed(), state, signature_weight=WEIGHT)
    embed_pending(_Hashed({view_text(c) for c in first}, stop), state, stop=stop, batch_size=4)
    assert views_pending().count() == 4
    later = [
        ChunkFactory(index_kind="code", context=f"lib/extra{n}.py", text=f"def extra_{n}():\n    return {n}")
        for n in range(4)
    ]
    asked = first[2]
    embed_first.add([asked.representation.document.rel_path])
    fake = _Hashed()

    embed_pending(fake, state, batch_size=4)

    assert fake.calls[0] == [view_text(asked)]
    assert set(fake.calls[1]) == {unit_text(c) for c in later}
    assert np.allclose(stored(asked), blended(asked), atol=1e-6)
    assert all(view_text(asked) not in call for call in fake.calls[1:])
    assert views_pending().count() == 0
    assert_holds_blends(dense_store(state), first + later)


class _Progress(Reporter):
    """Keeps every progress report."""

    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.reports: list[dict[str, int]] = []

    def progress(self, counters: dict[str, int], *, final: bool = False, running: bool = True) -> None:
        self.reports.append(dict(counters))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("interrupted", [False, True])
def test_an_indexing_pass_reports_the_views_it_embedded_and_those_still_to_come(tmp_path, state, interrupted):
    # what the server's stats estimate the time to full coverage from
    # (mcp_gateway.indexer_process.dense_eta): a pass stopped before its
    # views says they are still to come
    root = tmp_path / "root"
    root.mkdir()
    for n in range(5):
        (root / f"mod{n}.py").write_text(f"def handler_{n}(request):\n    return respond(request, {n})\n")
    config = build_config({"embed": {"signature_weight": WEIGHT}}, {}, {})
    stop = threading.Event()
    fake = _Hashed(stop_at_views=stop) if interrupted else _Hashed()
    check_models(fake, state, signature_weight=WEIGHT)
    reporter = _Progress()
    if interrupted:  # every view text stops the run, as a stop during the views pass does
        fake.views = _AnyView()

    Indexer(root, state, config, reporter=reporter, stop=stop, embedder=fake).run()

    units = Chunk.objects.filter(deleted=False, index_kind="code").count()
    final = reporter.reports[-1]
    assert units >= 5 and final["embedded_ok"] == final["chunks_total"]
    if interrupted:
        assert (final["views_embedded"], final["views_waiting"]) == (0, units)
        assert views_pending().count() == units
    else:
        assert (final["views_embedded"], final["views_waiting"]) == (units, 0)
        assert views_pending().count() == 0


class _AnyView(set[str]):
    """Every signature view text, for _Hashed's ``views``: whatever starts with a path line."""

    def __contains__(self, text: object) -> bool:
        return isinstance(text, str) and text.startswith("mod") and text.count("\n") < 2


class _StopAtViewCall(_Hashed):
    """Interrupts its ``at``-th call of signature views alone (1-based), as a
    stop during it does; ``views``: every view text."""

    def __init__(self, views: set[str], stop: threading.Event, at: int) -> None:
        super().__init__()
        self.views, self.stop, self.at, self.view_calls = views, stop, at, 0

    def embed(self, texts: Sequence[str], *, kind: str, stop: threading.Event | None = None) -> np.ndarray:
        if all(text in self.views for text in texts):
            self.view_calls += 1
            if self.view_calls == self.at:
                self.stop.set()
                raise Interrupted
        return super().embed(texts, kind=kind, stop=stop)


def replacing_store(state):
    """Twelve code chunks, the hashing embedder checked in with views, and
    the code index's store set to build again past four replacements."""
    chunks = code_chunks(12)
    fake = _Hashed()
    check_models(fake, state, signature_weight=WEIGHT)
    store = dense_store(state)
    store.replace_in_place_max = 4
    return chunks, fake, store


@pytest.mark.django_db
def test_many_replaced_vectors_build_the_index_again_instead_of_relinking_each(state) -> None:
    # hnswlib re-links a replaced vector's neighbours (ten insertions' CPU):
    # past the store's bound, the views pass's replacements build the index again
    chunks, fake, store = replacing_store(state)
    embed_pending(
        _StopAtViewCall({view_text(c) for c in chunks}, threading.Event(), at=1), state, batch_size=4
    )
    before = store.index("code")
    assert views_pending().count() == 12

    embed_pending(fake, state, batch_size=4)

    assert views_pending().count() == 0 and store.deferred("code") == 0
    assert store.index("code") is not before  # built again, not relinked in place
    assert_holds_blends(store, chunks)
    assert_holds_blends(DenseStore(state), chunks)  # the file saved holds them too


@pytest.mark.django_db
def test_replacements_deferred_while_views_wait_are_not_claimed_by_the_saved_file(state) -> None:
    # A views pass stopped after its first batch: that batch's blends wait
    # (the index holds the units' own vectors), so the file must not say it
    # holds every vector up to their version, or a process loading it would
    # never take them.
    chunks = code_chunks(12)
    views = {view_text(c) for c in chunks}
    check_models(_Hashed(), state, signature_weight=WEIGHT)
    stop = threading.Event()
    embed_pending(_StopAtViewCall(views, stop, at=2), state, stop=stop, batch_size=4)
    assert views_pending().count() == 8 and dense_store(state).deferred("code") == 4
    own = [vector(unit_text(c)) for c in chunks]
    assert np.allclose(scores(dense_store(state), chunks, own), 1.0, atol=SCORE_ATOL)  # still their own

    loaded = DenseStore(state)  # another process, from the saved file
    embed_chunks(_Hashed(), [c.chunk_id for c in chunks], batch_size=4)  # a worker embeds the rest

    assert views_pending().count() == 0
    assert_holds_blends(loaded, chunks)


@pytest.mark.django_db
def test_replacements_deferred_while_others_are_applied_in_place_are_applied_too(state) -> None:
    # Thread mode: a search thread's sync defers the replacements the
    # embedding thread stored while that thread applies the earlier ones in
    # place. Before, the settle then emptied the deferred set, dropping
    # those, and the file claimed their version: the index kept the units'
    # own vectors for good. The interleaving is made in one thread: the sync
    # runs when the settle reads the vectors it applies.
    chunks = code_chunks(12)
    views = {view_text(c) for c in chunks}
    check_models(_Hashed(), state, signature_weight=WEIGHT)
    stop = threading.Event()
    embed_pending(_StopAtViewCall(views, stop, at=2), state, stop=stop, batch_size=4)
    store = dense_store(state)
    assert store.deferred("code") == 4 and views_pending().count() == 8
    embed_chunks(_Hashed(), [c.chunk_id for c in chunks[4:8]], batch_size=4)  # 8 of 12 deferred: settle

    armed = [True]

    def meanwhile(execute, sql, params, many, context):  # Django's execute_wrapper signature
        if armed[0] and "embedding" in sql and "index_kind" not in sql:  # the settle's read
            armed[0] = False
            embed_chunks(_Hashed(), [c.chunk_id for c in chunks[8:]], batch_size=4)
            store.sync("code")  # the search thread: defers the last 4
        return execute(sql, params, many, context)

    with connection.execute_wrapper(meanwhile):
        store.sync("code")
    assert not armed[0] and views_pending().count() == 0

    assert_holds_blends(store, chunks)
    store.save(force=True)
    assert_holds_blends(DenseStore(state), chunks)  # the file saved holds them too


@pytest.mark.django_db(transaction=True)
def test_vectors_a_search_adds_while_the_index_is_built_again_are_in_the_index_built(state) -> None:
    # Thread mode: the embedding thread builds the code index again (many
    # replacements) while a search thread's sync adds a new chunk's vector,
    # stored after the rebuild listed the ids: the sync adds it to the old
    # index, the rebuild's index takes the old one's place, and the sync
    # must not then claim the new version for the index built without it.
    chunks = code_chunks(12)
    views = {view_text(c) for c in chunks}
    check_models(_Hashed(), state, signature_weight=WEIGHT)
    stop = threading.Event()
    embed_pending(_StopAtViewCall(views, stop, at=1), state, stop=stop, batch_size=4)
    store = dense_store(state)
    store.replace_in_place_max = 4
    embed_chunks(_Hashed(), [c.chunk_id for c in chunks[:8]], batch_size=4)  # 8 replacements: a rebuild
    late = code_chunks(1)[0]  # pending: stored once the rebuild has listed the ids
    listed, go = threading.Event(), threading.Event()

    def rebuilding() -> None:
        step = ["ids"]

        def paused(execute, sql, params, many, context):  # Django's execute_wrapper signature
            # the rebuild lists the stored ids (no vector, no embed_seq), then reads their vectors
            if (
                step[0] == "ids"
                and "index_kind" in sql
                and "embed" not in sql.replace("embedding_status", "x")
            ):
                step[0] = "rows"
            elif step[0] == "rows" and "embedding" in sql.replace("embedding_", ""):
                step[0] = "done"
                listed.set()
                go.wait()
            return execute(sql, params, many, context)

        try:
            with connection.execute_wrapper(paused):
                store.sync("code")
        finally:
            connection.close()

    thread = threading.Thread(target=rebuilding)
    thread.start()
    assert listed.wait(60)
    embed_chunks(_Hashed(), [late.chunk_id], batch_size=4)

    def swapped_meanwhile(execute, sql, params, many, context):
        if not go.is_set() and "embedding" in sql.replace("embedding_", ""):
            go.set()
            thread.join()  # the rebuild ends while this sync reads the new vector
        return execute(sql, params, many, context)

    with connection.execute_wrapper(swapped_meanwhile):
        store.sync("code")
    assert go.is_set()

    index = store.sync("code")
    assert index is not None and late.chunk_id in index


@pytest.mark.django_db
def test_an_index_that_took_long_to_save_waits_longer_for_its_next_save(state, monkeypatch) -> None:
    # A save writes, fsyncs and reads back the whole file on the thread that
    # feeds the model (a 63,000-unit code index: 106 MB, up to 1.8 s): after
    # a save of S seconds the next waits S / save_share. With no minimum
    # interval and saves allowed no share of the time, the first batch's
    # save is the last until the run's forced one; before, every batch saved.
    monkeypatch.setattr(embedding, "SAVE_EVERY_SECONDS", 0.0)
    chunks = code_chunks(8)
    fake = _Hashed()
    check_models(fake, state, signature_weight=0.0)
    store = dense_store(state)
    store.save_share = 1e-12
    path = index_path(state, "code")
    files = []

    def progress(count: int) -> None:  # after each batch is stored, added and (maybe) saved
        files.append(path.stat().st_ino)  # each save replaces the file: a new inode

    embed_pending(fake, state, batch_size=4, progress=progress)

    assert len(files) == 2 and files[0] == files[1]  # the second batch did not save
    saved = VectorIndex(path, DIM, "fake")
    assert saved.load() and len(saved) == len(chunks)  # the run's end saved every vector


@pytest.mark.django_db
def test_the_embedding_process_builds_the_code_index_again_once_at_the_end_of_its_views_pass(state) -> None:
    # Building it again costs what inserting every vector once does (two
    # hnswlib threads, 17 CPU s for the standard library's 63,017 units):
    # the pass's own end applies every replacement, so one build half-way
    # through (when they reached half the index) was that cost twice.
    chunks, fake, store = replacing_store(state)
    held = []

    def views_progress(count: int) -> None:  # after each views batch is stored and added
        held.append(store.index("code"))

    embed_pending(fake, state, batch_size=4, views_progress=views_progress)

    # not built again half-way (8 of 12 replacements waiting), but once the
    # last batch left no view pending
    assert len(held) == 3 and held[0] is held[1] and held[2] is not held[1]
    assert store.index("code") is held[2]
    assert views_pending().count() == 0 and store.deferred("code") == 0
    assert_holds_blends(store, chunks)


@pytest.mark.django_db
def test_a_change_of_vector_store_builds_the_index_again_from_the_stored_vectors(state, caplog) -> None:
    chunks = code_chunks(6)
    check_models(_Hashed(), state, signature_weight=WEIGHT, vector_store="hnswlib", records_store=True)
    embed_pending(_Hashed(), state, batch_size=4)
    store = dense_store(state)
    before = store.sync("code")
    assert before is not None and before.store == "hnswlib"
    store.save(force=True)

    # the indexing process records another rag.vector_store
    check_models(_Hashed(), state, signature_weight=WEIGHT, vector_store="usearch-i8", records_store=True)
    with caplog.at_level(logging.WARNING):
        after = store.sync("code")  # this process's index follows it
        fresh = DenseStore(state).sync("code")  # and one started now, whose file is hnswlib's

    assert after is not None and after.store == "usearch-i8" and after.labels == before.labels
    assert fresh is not None and fresh.store == "usearch-i8" and fresh.labels == before.labels
    assert "rag.vector_store is usearch-i8" in caplog.text
    own = np.stack([blended(c) for c in chunks])
    for index in (after, fresh):
        assert [index.search(query, 1)[0].chunk_id for query in own] == [c.chunk_id for c in chunks]
    store.save(force=True)
    assert json.loads(index_path(state, "code").with_name("vectors_code.hnsw.json").read_text())["store"] == (
        "usearch-i8"
    )
